#!/usr/bin/env bash
# What losing a node mid-request costs: `lattice run --nodes 3` (tensor parallel) with rank 2
# killed (SIGKILL) or stopped (SIGSTOP) after --at tokens, against the same run without a
# fault, alternating, --reps times. Per fault: the median time the survivors spent re-placing
# the model (shrink, agreement, re-binding, re-reading the context: `recover_ms` of the JSON),
# the median wall time lost against the run without a fault (detection included: a stopped
# node is found by the heartbeats, 750 ms by default), and whether the tokens generated before
# the fault matched (after it, 2 ranks sum the shards in another order than 3: quantized
# models may then pick another token at a near tie, as a 2-rank run would).
#
#   bench/recovery.sh [-m MODEL] [--provider tcp|shm] [--reps 3] [-n 48] [--at 16]
#
# Default model: the 1.1B Llama shape in Q4_0 made by bench/dist_vs_llamacpp.sh, else the demo
# model. LATTICE (default build/lattice) chooses the binary.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
LATTICE=${LATTICE:-$here/build/lattice}
model=/tmp/lattice-bench-models/tinyllama-q4_0.gguf; provider=tcp; reps=3; gens=48; at=16
while (($#)); do
  case "$1" in
    -m) model=$2; shift 2 ;;
    --provider) provider=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    -n) gens=$2; shift 2 ;;
    --at) at=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "recovery: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$LATTICE" ] || { echo "recovery: $LATTICE not built" >&2; exit 2; }
if [ ! -f "$model" ]; then
  model=${XDG_CACHE_HOME:-$HOME/.cache}/lattice/demo-llama-q8_0-d512-l4.gguf
  [ -f "$model" ] || "$LATTICE" run --demo -n 1 >/dev/null 2>&1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

one() {  # label fault -> appends "wall_s recover_ms same_tokens" to $work/$label
  local label=$1 fault=$2 t0 t1
  local args=(run -m "$model" -p "the quick brown fox jumps over the lazy dog" -n "$gens" --temp 0 --ignore-eos
              -t 1 --nodes 3 --provider "$provider" --json)
  [ -n "$fault" ] && args+=(--inject-fault "$fault")
  t0=$(date +%s.%N)
  "$LATTICE" "${args[@]}" > "$work/out.json" 2>/dev/null || { echo "recovery: run failed ($label)" >&2; exit 1; }
  t1=$(date +%s.%N)
  python3 - "$work" "$label" "$t0" "$t1" "$at" <<'PY'
import json, sys
work, label, t0, t1, at = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
j = json.load(open(f"{work}/out.json"))
rec = j.get("recoveries", [])
ms = rec[0]["recover_ms"] if rec else 0.0
if label == "none":
    json.dump(j["tokens"], open(f"{work}/ref.json", "w"))
ref = json.load(open(f"{work}/ref.json"))
with open(f"{work}/{label}", "a") as f:
    f.write(f"{t1 - t0:.3f} {ms:.1f} {int(j['tokens'][:at] == ref[:at] and len(j['tokens']) == len(ref))} {len(rec)}\n")
PY
}

for _ in $(seq "$reps"); do
  one none ""
  one kill "2@$at"
  one stop "2@$at:stop"
done
echo "## lattice run --nodes 3 -> 2 (tensor parallel over $provider), $(basename "$model"), -n $gens, rank 2 lost at token $at; $reps reps; load: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work" <<'PY'
import statistics, sys
w = sys.argv[1]
def rows(label):
    return [tuple(map(float, l.split())) for l in open(f"{w}/{label}")]
base = statistics.median(r[0] for r in rows("none"))
print(f"{'fault':8} {'recover ms (median)':>20} {'wall s':>8} {'lost s vs no fault':>20} {'tokens ok':>12} {'recoveries':>10}")
print(f"{'none':8} {'-':>20} {base:>8.2f} {'-':>20} {'-':>12} {'-':>10}")
for label in ("kill", "stop"):
    r = rows(label)
    wall = statistics.median(x[0] for x in r)
    print(f"{label:8} {statistics.median(x[1] for x in r):>20.0f} {wall:>8.2f} {wall - base:>20.2f} "
          f"{sum(int(x[2]) for x in r)}/{len(r):<10} {int(statistics.median(x[3] for x in r)):>10}")
PY
