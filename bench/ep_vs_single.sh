#!/usr/bin/env bash
# Expert-parallel decode against one process, same-run triples on one GGUF file (the issue's
# Qwen3-MoE bench shape, Q4_0, written once by make-model): llama.cpp's `llama-bench -t 2`
# (tg32), `lattice bench engine -t 2` (tg32), and `lattice run --nodes 2 -t 1 --parallel ep`
# over shm and over tcp (decode tok/s of a 64-token greedy generation), ROUNDS times in turn;
# prints each round, the median ratios against llama-bench, and the expert balance the runs
# report (the busiest rank's expert rows against a perfect split).
#   bench/ep_vs_single.sh LATTICE [ROUNDS] [extra run flags, e.g. --split 1,1]
# Env: MODEL (default /tmp/lattice-bench-models/qwen3moe-bench-q4_0.gguf, made if missing; e.g. the
#      deepseek2 /tmp/lattice-bench-models/dsv3-proportions-q4_0.gguf of bench/deepseek2_vs_llamacpp.sh),
#      PARALLEL (ep, default, or tp: the same runs tensor parallel, every expert split by columns),
#      LLAMA_BIN (default /tmp/lattice-peers/llama.cpp/build/bin; llama-bench is skipped when absent).
set -euo pipefail
L=$1 ROUNDS=${2:-3}
shift $(( $# >= 2 ? 2 : 1 ))
M=${MODEL:-/tmp/lattice-bench-models/qwen3moe-bench-q4_0.gguf}
LB=${LLAMA_BIN:-/tmp/lattice-peers/llama.cpp/build/bin}
if [ ! -f "$M" ]; then
  mkdir -p "$(dirname "$M")"
  "$L" make-model --arch qwen3moe --dim 2048 --layers 24 --heads 32 --kv-heads 4 --head-dim 64 \
    --experts 32 --experts-used 8 --expert-ffn 512 --ffn 5632 --vocab 32000 --type q4_0 --seed 1 -o "$M.tmp"
  mv "$M.tmp" "$M"
fi
py() { /usr/bin/python3 -c "$@"; }
run_ep() {  # provider -> "tok/s balance"
  "$L" run -m "$M" -p "The cluster is one computer" -n 64 --temp 0 --ignore-eos --nodes 2 --provider "$1" -t 1 \
    --parallel "${PARALLEL:-ep}" "${@:2}" --json 2>/dev/null |
    py "import json,sys; j=json.load(sys.stdin); print(j['decode_tok_s'], j['expert_load']['balance'])"
}
r_shm=() r_tcp=() r_eng=()
for r in $(seq 1 "$ROUNDS"); do
  llama=0
  if [ -x "$LB/llama-bench" ]; then
    llama=$(LD_LIBRARY_PATH=$LB "$LB/llama-bench" -m "$M" -t 2 -p 0 -n 32 -r 2 -o json 2>/dev/null |
            py "import json,sys; print(json.load(sys.stdin)[0]['avg_ts'])")
  fi
  eng=$("$L" bench engine -m "$M" -p 0 -n 32 -t 2 -r 2 --json 2>/dev/null | py "import json,sys; print(json.load(sys.stdin)[0]['avg_ts'])")
  read -r shm bal_shm <<<"$(run_ep shm "$@")"
  read -r tcp bal_tcp <<<"$(run_ep tcp "$@")"
  echo "round $r: llama-bench -t 2 $llama tok/s | bench engine -t 2 $eng | ${PARALLEL:-ep} 2x1 shm $shm (balance $bal_shm) | ${PARALLEL:-ep} 2x1 tcp $tcp (balance $bal_tcp)"
  if py "import sys; sys.exit(0 if float('$llama') > 0 else 1)"; then
    r_shm+=("$(py "print($shm / $llama)")") r_tcp+=("$(py "print($tcp / $llama)")") r_eng+=("$(py "print($eng / $llama)")")
  fi
done
P=${PARALLEL:-ep}
if [ ${#r_shm[@]} -gt 0 ]; then
  py "import statistics as s,sys; a=sys.argv[1:]; n=len(a)//3
print('median vs llama-bench -t 2: $P shm %.3f, $P tcp %.3f, bench engine -t 2 %.3f' % tuple(s.median(map(float, a[i*n:(i+1)*n])) for i in range(3)))" \
    "${r_shm[@]}" "${r_tcp[@]}" "${r_eng[@]}"
fi
