#!/usr/bin/env bash
# Distributed decode side by side with llama.cpp in one run: lattice tensor parallel on
# 2 ranks x 1 thread (local processes, over shm and over tcp loopback) against llama-bench,
# one process with 2 threads, on the same GGUF. The three alternate for --rounds rounds (drift
# on a shared machine hits all of them); each row is the median over rounds, with ours/theirs,
# and lattice's bytes sent and time in collectives per token (median over rounds, rank 0).
#
#   bench/dist_vs_llamacpp.sh [--type q4_0] [-n 64] [--rounds 5] [--shape tinyllama|small] [--json]
#
# The model is made once with `lattice make-model` (1.1B Llama shape: dim 2048, 22 layers,
# 32/4 heads, ffn 5632, vocab 32000) into $MODELS_DIR (default /tmp/lattice-bench-models).
# LATTICE (default build/lattice) and LLAMA_BENCH choose the binaries.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
LATTICE=${LATTICE:-$here/build/lattice}
LLAMA_BENCH=${LLAMA_BENCH:-/tmp/lattice-peers/llama.cpp/build/bin/llama-bench}
MODELS_DIR=${MODELS_DIR:-/tmp/lattice-bench-models}
type=q4_0; gens=64; rounds=5; shape=tinyllama; json=0
while (($#)); do
  case "$1" in
    --type) type=$2; shift 2 ;;
    -n) gens=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --shape) shape=$2; shift 2 ;;
    --json) json=1; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "dist_vs_llamacpp: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$LATTICE" ] || { echo "dist_vs_llamacpp: $LATTICE not built" >&2; exit 2; }
[ -x "$LLAMA_BENCH" ] || { echo "dist_vs_llamacpp: no llama-bench at $LLAMA_BENCH" >&2; exit 2; }
case "$shape" in
  tinyllama) shape_args=(--dim 2048 --layers 22 --heads 32 --kv-heads 4 --ffn 5632 --vocab 32000) ;;
  small) shape_args=(--dim 512 --layers 4 --heads 8 --kv-heads 2 --ffn 1408 --vocab 4096) ;;
  *) echo "dist_vs_llamacpp: unknown shape $shape" >&2; exit 2 ;;
esac
mkdir -p "$MODELS_DIR"
model="$MODELS_DIR/$shape-$type.gguf"
if [ ! -f "$model" ]; then
  echo "making $model" >&2
  "$LATTICE" make-model --arch llama "${shape_args[@]}" --type "$type" --seed 1 -o "$model.tmp" >/dev/null
  mv "$model.tmp" "$model"
fi
out=$(mktemp -d /tmp/dist-vs-llamacpp.XXXXXX)
trap 'rm -rf "$out"' EXIT
for ((round = 0; round < rounds; ++round)); do
  echo "round $((round + 1))/$rounds" >&2
  for prov in shm tcp; do
    "$LATTICE" run -m "$model" -p "Once upon a time" -n "$gens" --temp 0 --ignore-eos --nodes 2 --provider "$prov" \
      -t 1 --json >"$out/ours-$prov-$round.json"
  done
  "$LLAMA_BENCH" -m "$model" -p 0 -n "$gens" -t 2 -r 1 -o json >"$out/theirs-$round.json" 2>/dev/null
done
python3 - "$out" "$json" "$model" <<'PY'
import glob, json, os, statistics, sys
out, as_json, model = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
med = statistics.median
theirs = [json.load(open(p))[0]["avg_ts"] for p in sorted(glob.glob(os.path.join(out, "theirs-*.json")))]
rows = []
for prov in ("shm", "tcp"):
    runs = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, f"ours-{prov}-*.json")))]
    tok_s = [r["decode_tok_s"] for r in runs]
    rows.append({
        "config": f"lattice tp 2 ranks x 1 thread, {prov}",
        "decode_tok_s": med(tok_s), "min": min(tok_s), "max": max(tok_s),
        "llamacpp_2t_tok_s": med(theirs),
        "ratio": med(tok_s) / med(theirs),
        "bytes_sent_per_token": med([r["ranks"][0]["bytes_sent_per_token"] for r in runs]),
        "coll_ms_per_token": med([r["ranks"][0]["coll_ms_per_token"] for r in runs]),
        "rounds": len(runs),
    })
if as_json:
    print(json.dumps({"model": model, "llamacpp_2t": theirs, "rows": rows}, indent=2))
else:
    print(f"model {os.path.basename(model)}; llama.cpp 1 process x 2 threads: median {med(theirs):.2f} tok/s "
          f"(rounds: {', '.join(f'{x:.1f}' for x in theirs)})")
    print(f"{'config':42} {'tok/s':>8} {'range':>13} {'ratio':>6} {'B/token':>9} {'coll ms/tok':>11}")
    for r in rows:
        print(f"{r['config']:42} {r['decode_tok_s']:8.2f} {r['min']:6.1f}-{r['max']:<6.1f} {r['ratio']:6.2f} "
              f"{r['bytes_sent_per_token']:9.0f} {r['coll_ms_per_token']:11.2f}")
PY
