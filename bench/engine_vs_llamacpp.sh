#!/usr/bin/env bash
# lattice's engine side by side with llama.cpp's llama-bench on the same GGUF files, same
# threads, in one run: for every model type and thread count the two alternate for
# --rounds rounds (so drift on a shared machine hits both), and each row reports the median
# over rounds of each engine's mean tokens/s, and ours/theirs.
#
#   bench/engine_vs_llamacpp.sh [--types "q4_0 q8_0"] [-p 64,512] [-n 128] [-t 1,2] [-r 5]
#                               [--rounds 3] [--shape tinyllama|small] [--json]
#
# Models are made once with `lattice make-model` (1.1B Llama shape: dim 2048, 22 layers,
# 32/4 heads, ffn 5632, vocab 32000) into $MODELS_DIR (default /tmp/lattice-bench-models).
# Types make-model does not write (q4_1 q5_0 q5_1 iq4_nl) are made from the q4_0 file by
# llama.cpp's llama-quantize --allow-requantize (LLAMA_QUANTIZE, default next to llama-bench).
# LATTICE (default build/lattice) and LLAMA_BENCH (default the peer build in
# /tmp/lattice-peers) choose the binaries.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
LATTICE=${LATTICE:-$here/build/lattice}
LLAMA_BENCH=${LLAMA_BENCH:-/tmp/lattice-peers/llama.cpp/build/bin/llama-bench}
MODELS_DIR=${MODELS_DIR:-/tmp/lattice-bench-models}
LLAMA_QUANTIZE=${LLAMA_QUANTIZE:-$(dirname "$LLAMA_BENCH")/llama-quantize}
types="q4_0 q8_0"; prompts=64,512; gens=128; threads=1,2; reps=5; rounds=3; shape=tinyllama; json=0
while (($#)); do
  case "$1" in
    --types) types=$2; shift 2 ;;
    -p) prompts=$2; shift 2 ;;
    -n) gens=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    -r) reps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --shape) shape=$2; shift 2 ;;
    --json) json=1; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "engine_vs_llamacpp: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$LATTICE" ] || { echo "engine_vs_llamacpp: $LATTICE not built (scripts/build.sh)" >&2; exit 2; }
[ -x "$LLAMA_BENCH" ] || { echo "engine_vs_llamacpp: no llama-bench at $LLAMA_BENCH (see /work/shared/bench/peers/build-llamacpp.sh)" >&2; exit 2; }
case "$shape" in
  tinyllama) shape_args=(--dim 2048 --layers 22 --heads 32 --kv-heads 4 --ffn 5632 --vocab 32000) ;;
  small) shape_args=(--dim 512 --layers 4 --heads 8 --kv-heads 2 --ffn 1408 --vocab 4096) ;;
  *) echo "engine_vs_llamacpp: unknown shape $shape" >&2; exit 2 ;;
esac
mkdir -p "$MODELS_DIR"
out=$(mktemp -d /tmp/engine-vs-llamacpp.XXXXXX)
trap 'rm -rf "$out"' EXIT
export LATTICE_COMMIT=${LATTICE_COMMIT:-$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)}

for type in $types; do
  model="$MODELS_DIR/$shape-$type.gguf"
  if [ ! -f "$model" ]; then
    echo "making $model" >&2
    case "$type" in
      q4_1|q5_0|q5_1|iq4_nl)
        base="$MODELS_DIR/$shape-q4_0.gguf"
        [ -f "$base" ] || "$LATTICE" make-model --arch llama "${shape_args[@]}" --type q4_0 --seed 1 -o "$base" >/dev/null
        LD_LIBRARY_PATH=$(dirname "$LLAMA_QUANTIZE") "$LLAMA_QUANTIZE" --allow-requantize "$base" "$model.tmp" \
          "${type^^}" >/dev/null 2>&1 ;;
      *) "$LATTICE" make-model --arch llama "${shape_args[@]}" --type "$type" --seed 1 -o "$model.tmp" >/dev/null ;;
    esac
    mv "$model.tmp" "$model"
  fi
  IFS=, read -ra tlist <<<"$threads"
  for t in "${tlist[@]}"; do
    for ((round = 0; round < rounds; ++round)); do
      echo "round $((round + 1))/$rounds: $type, $t threads" >&2
      "$LATTICE" bench engine -m "$model" -p "$prompts" -n "$gens" -t "$t" -r "$reps" --json \
        >"$out/ours-$type-$t-$round.json"
      "$LLAMA_BENCH" -m "$model" -p "$prompts" -n "$gens" -t "$t" -r "$reps" -o json \
        >"$out/theirs-$type-$t-$round.json" 2>/dev/null
    done
  done
done

python3 - "$out" "$json" <<'PY'
import glob, json, os, statistics, sys
out, as_json = sys.argv[1], sys.argv[2] == "1"
rows = {}  # (type, threads, test) -> {"ours": [..], "theirs": [..]}
meta = {}
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    who, typ, t, _ = os.path.basename(path)[:-5].split("-")
    data = json.load(open(path))
    for r in data:
        if who == "ours":
            test = r["test"]
            meta.setdefault("lattice", {k: r[k] for k in ("commit", "build_flags", "isa")})
        else:
            test = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
            meta.setdefault("llama.cpp", {"commit": r.get("build_commit"), "cpu": r.get("cpu_info")})
        rows.setdefault((typ, int(t), test), {"ours": [], "theirs": []})[who].append(r["avg_ts"])
def order(k):
    typ, t, test = k
    return (typ, t, test[:2] != "pp", int(test[2:]))
result = []
for k in sorted(rows, key=order):
    v = rows[k]
    if not v["ours"] or not v["theirs"]:
        continue
    o, th = statistics.median(v["ours"]), statistics.median(v["theirs"])
    result.append({"type": k[0], "threads": k[1], "test": k[2], "lattice_tok_s": round(o, 2),
                   "llamacpp_tok_s": round(th, 2), "ratio": round(o / th, 3), "rounds": len(v["ours"]),
                   "lattice_rounds": [round(x, 2) for x in v["ours"]],
                   "llamacpp_rounds": [round(x, 2) for x in v["theirs"]]})
if as_json:
    print(json.dumps({"rows": result, "meta": meta}, indent=1))
else:
    print("| type | threads | test | lattice t/s | llama.cpp t/s | ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in result:
        print(f"| {r['type']} | {r['threads']} | {r['test']} | {r['lattice_tok_s']:.2f} | {r['llamacpp_tok_s']:.2f} | {r['ratio']:.2f} |")
    print()
    print("medians over", result[0]["rounds"] if result else 0, "alternating rounds;", json.dumps(meta))
PY
