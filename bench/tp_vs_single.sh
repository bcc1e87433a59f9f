#!/usr/bin/env bash
# Tensor-parallel decode against one process, same-run pairs: `bench engine -t 2` (tg64, one
# process, two threads) against `run --nodes 2 -t 1` (two rank processes of one thread over
# shm; decode tok/s of a 64-token greedy generation), ROUNDS times alternately; prints each
# pair and the median ratio. Two processes cannot beat one process with two threads: the
# ratio is the cost of distributing.
#   bench/tp_vs_single.sh LATTICE [ROUNDS] [extra run flags, e.g. --no-recover]
set -euo pipefail
L=$1 ROUNDS=${2:-5}
shift $(( $# >= 2 ? 2 : 1 ))
M=${MODEL:-/tmp/lattice-bench-models/tinyllama-q4_0.gguf}
ratios=()
for r in $(seq 1 "$ROUNDS"); do
  one=$("$L" bench engine -m "$M" -p 0 -n 64 -t 2 -r 2 --json 2>/dev/null | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)[0]['avg_ts'])")
  two=$("$L" run -m "$M" -p "The cluster is one computer" -n 64 --temp 0 --ignore-eos --nodes 2 --provider shm -t 1 "$@" --json 2>/dev/null |
        /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['decode_tok_s'])")
  ratio=$(/usr/bin/python3 -c "print('%.3f' % ($two / $one))")
  echo "pair $r: one process x 2 threads $one tok/s, 2 ranks x 1 thread $two tok/s, ratio $ratio"
  ratios+=("$ratio")
done
/usr/bin/python3 -c "import statistics,sys; print('median ratio %.3f' % statistics.median(map(float, sys.argv[1:])))" "${ratios[@]}"
