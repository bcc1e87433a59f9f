#!/usr/bin/env bash
# One training step of lattice train side by side with PyTorch (Debian's python3-torch, CPU,
# OpenBLAS) on the same shape: a Llama of dim 256, 4 layers, 8 heads, FFN 768, vocab 4096,
# sequence 256, batch 16, AdamW. Rows:
#   threads T     one process with T threads (-t), against torch_train_step.py T
#   dp 2x1        lattice --nodes 2 -t 1 against torch DDP (gloo) 2 processes x 1 thread
#                 (bench/torch_ddp_step.py); per-rank batch 16 on both sides, as DDP counts
#                 it, so lattice runs --batch 32 (its --batch is the global batch)
#   scaling       lattice samples/s of dp 2x1 over those of 1 rank x 1 thread (target >= 1.7)
# The two sides alternate for --rounds rounds (drift on a shared machine hits both); each
# figure is the median over rounds of each side's median step time; ratio = lattice/torch
# (<= 1.0 is the target).
#
#   bench/train_vs_torch.sh [-t 1,2] [--steps 6] [--rounds 2] [--no-dp] [--json]
#
# The peers are ../shared/bench/peers/torch_train_step.py (PEER=...) and bench/torch_ddp_step.py
# (DDP_PEER=...), run with /usr/bin/python3 with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset
# for them alone. lattice trains on the first MiB of the King James Bible
# (scripts/kjv_corpus.sh); the step time does not depend on the text.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
LATTICE=${LATTICE:-$here/build/lattice}
PEER=${PEER:-$here/../shared/bench/peers/torch_train_step.py}
DDP_PEER=${DDP_PEER:-$here/bench/torch_ddp_step.py}
[ -f "$PEER" ] || PEER=/work/shared/bench/peers/torch_train_step.py
threads=1,2; steps=6; rounds=2; json=0; dp=1
while (($#)); do
  case "$1" in
    -t) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --json) json=1; shift ;;
    --no-dp) dp=0; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
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
peer() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 "$@" | sed -E 's/.*step ([0-9.]+) ms median.*/\1/'; }
ours() {  # ours THREADS BATCH [lattice train flags...]
  local t=$1 b=$2; shift 2
  "$LATTICE" train --data "$work/corpus.txt" --dim 256 --layers 4 --heads 8 --ffn 768 --vocab 4096 \
    --seq 256 --batch "$b" --steps $((steps + 2)) --warmup 1 --val-every 0 --val-windows 1 -t "$t" -q --json \
    -o "$work/m.gguf" "$@" | sed -E 's/.*"step_ms_median":([0-9.e+-]+).*/\1/'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
IFS=, read -ra tlist <<< "$threads"
one_rank_ms=""
for t in "${tlist[@]}"; do
  o_=(); p_=()
  for ((r = 0; r < rounds; r++)); do
    p_+=("$(peer "$PEER" "$t" "$steps")")
    o_+=("$(ours "$t" 16)")
  done
  o=$(printf '%s\n' "${o_[@]}" | median); p=$(printf '%s\n' "${p_[@]}" | median)
  [ "$t" = 1 ] && one_rank_ms=$o
  rows+=("threads_$t $o $p $(ratio "$o" "$p")")
done
scaling=""
if ((dp)); then
  o_=(); p_=()
  for ((r = 0; r < rounds; r++)); do
    p_+=("$(peer "$DDP_PEER" 2 1 "$steps")")
    o_+=("$(ours 1 32 --nodes 2)")
  done
  o=$(printf '%s\n' "${o_[@]}" | median); p=$(printf '%s\n' "${p_[@]}" | median)
  rows+=("dp_2x1 $o $p $(ratio "$o" "$p")")
  [ -n "$one_rank_ms" ] || one_rank_ms=$(ours 1 16)
  # samples/s: 32 a step on 2 ranks, 16 on one.
  scaling=$(awk -v two="$o" -v one="$one_rank_ms" 'BEGIN {printf "%.2f", (32 / two) / (16 / one)}')
fi
torch_ver=$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')
if ((json)); then
  printf '{"peer": "torch %s", "rows": [' "$torch_ver"
  sep=""
  for row in "${rows[@]}"; do
    read -r name o p ratio <<< "$row"
    printf '%s{"run": "%s", "lattice_step_ms": %s, "torch_step_ms": %s, "ratio": %s}' "$sep" "$name" "$o" "$p" "$ratio"
    sep=", "
  done
  printf ']%s}\n' "${scaling:+, \"scaling_2_ranks\": $scaling}"
else
  echo "lattice train vs torch $torch_ver: one step, seq 256, dim 256, 4 layers, vocab 4096, batch 16 a rank (median of $rounds rounds x $steps steps)"
  printf '%-10s %14s %14s %16s\n' run lattice_ms torch_ms lattice/torch
  for row in "${rows[@]}"; do
    read -r name o p ratio <<< "$row"
    printf '%-10s %14.1f %14.1f %16s\n' "$name" "$o" "$p" "$ratio"
  done
  [ -z "$scaling" ] || echo "scaling: lattice 2 ranks x 1 thread = ${scaling}x the samples/s of 1 rank x 1 thread (target >= 1.7)"
fi
