#!/usr/bin/env bash
# One training step of lattice train side by side with PyTorch (Debian's python3-torch, CPU,
# OpenBLAS) on the same shape: a Llama of dim 256, 4 layers, 8 heads, FFN 768, vocab 4096,
# sequence 256, batch 16, AdamW. For every thread count the two alternate for --rounds rounds
# (drift on a shared machine hits both); each row is the median over rounds of each side's
# median step time, and lattice/torch (<= 1.0 is the target).
#
#   bench/train_vs_torch.sh [-t 1,2] [--steps 6] [--rounds 2] [--json]
#
# The peer is ../shared/bench/peers/torch_train_step.py (PEER=...) run with /usr/bin/python3,
# with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for it alone. lattice trains on the first
# MiB of the King James Bible (scripts/kjv_corpus.sh); the step time does not depend on the text.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
LATTICE=${LATTICE:-$here/build/lattice}
PEER=${PEER:-$here/../shared/bench/peers/torch_train_step.py}
[ -f "$PEER" ] || PEER=/work/shared/bench/peers/torch_train_step.py
threads=1,2; steps=6; rounds=2; json=0
while (($#)); do
  case "$1" in
    -t) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --json) json=1; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "train_vs_torch: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$LATTICE" ] || { echo "train_vs_torch: $LATTICE missing (scripts/build.sh lattice)" >&2; exit 1; }
/usr/bin/python3 -c 'import torch' 2>/dev/null || { echo "train_vs_torch: /usr/bin/python3 has no torch (apt-get install python3-torch)" >&2; exit 1; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$here/scripts/kjv_corpus.sh" "$work/kjv.txt" >/dev/null
head -c 1048576 "$work/kjv.txt" > "$work/corpus.txt"
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
rows=()
IFS=, read -ra tlist <<< "$threads"
for t in "${tlist[@]}"; do
  ours=(); theirs=()
  for ((r = 0; r < rounds; r++)); do
    line=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 "$PEER" "$t" "$steps")
    theirs+=("$(sed -E 's/.*step ([0-9.]+) ms median.*/\1/' <<< "$line")")
    j=$("$LATTICE" train --data "$work/corpus.txt" --dim 256 --layers 4 --heads 8 --ffn 768 --vocab 4096 \
          --seq 256 --batch 16 --steps $((steps + 2)) --warmup 1 --val-every 0 --val-windows 1 -t "$t" -q --json \
          -o "$work/m.gguf")
    ours+=("$(sed -E 's/.*"step_ms_median":([0-9.e+-]+).*/\1/' <<< "$j")")
  done
  o=$(printf '%s\n' "${ours[@]}" | median); p=$(printf '%s\n' "${theirs[@]}" | median)
  rows+=("$t $o $p $(awk -v a="$o" -v b="$p" 'BEGIN {printf "%.2f", a / b}')")
done
torch_ver=$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')
if ((json)); then
  printf '{"peer": "torch %s", "rows": [' "$torch_ver"
  sep=""
  for row in "${rows[@]}"; do
    read -r t o p ratio <<< "$row"
    printf '%s{"threads": %s, "lattice_step_ms": %s, "torch_step_ms": %s, "ratio": %s}' "$sep" "$t" "$o" "$p" "$ratio"
    sep=", "
  done
  printf ']}\n'
else
  echo "lattice train vs torch $torch_ver: one step, batch 16 x seq 256, dim 256, 4 layers, vocab 4096 (median of $rounds rounds x $steps steps)"
  printf '%-8s %14s %14s %16s\n' threads lattice_ms torch_ms lattice/torch
  for row in "${rows[@]}"; do
    read -r t o p ratio <<< "$row"
    printf '%-8s %14.1f %14.1f %16s\n' "$t" "$o" "$p" "$ratio"
  done
fi
