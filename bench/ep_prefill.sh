#!/usr/bin/env bash
# Expert-parallel prefill, the two paths side by side: `lattice run --nodes 2 -t 1 --parallel ep`
# with --ep-prefill reduce (every rank all rows, two all-reduces a layer) and --ep-prefill a2a
# (rows split over the ranks, all-to-all dispatch and combine), over shm and tcp, for prompts of
# about LENGTHS tokens, each prefilled in one step (--prefill-batch = the prompt's length), on
# the issue's two bench shapes (Q4_0). The two paths run back to back for each cell, ROUNDS
# times; prints every run (prefill tok/s, the path the run reports) and per cell the median
# ratio a2a / reduce (> 1: all-to-all is faster). The engine's rule (ForwardOptions::
# kEpA2aMinRows) is taken from these ratios.
#   bench/ep_prefill.sh LATTICE [ROUNDS]
# Env: MODELS (default: the qwen3moe and dsv3-proportions files of bench/ep_vs_single.sh and
#      bench/deepseek2_vs_llamacpp.sh, which make them), LENGTHS (default "64 256 1024"),
#      PROVIDERS (default "shm tcp").
set -euo pipefail
L=$1 ROUNDS=${2:-1}
D=/tmp/lattice-bench-models
MODELS=${MODELS:-"$D/qwen3moe-bench-q4_0.gguf $D/dsv3-proportions-q4_0.gguf"}
LENGTHS=${LENGTHS:-"64 256 1024"}
PROVIDERS=${PROVIDERS:-"shm tcp"}
py() { /usr/bin/python3 -c "$@"; }
for M in $MODELS; do
  [ -f "$M" ] || { echo "missing $M (bench/ep_vs_single.sh or bench/deepseek2_vs_llamacpp.sh makes it)" >&2; exit 2; }
done
SENT="The cluster is one computer, and every node holds a part of the model. "
# Tokens of SENT x 8 on this file's vocabulary (one node, -n 0): the repeat count for a length.
per_sentence() {
  "$L" run -m "$1" -p "$(py "print('''$SENT''' * 8, end='')")" -n 0 --json 2>/dev/null |
    py "import json,sys; print(json.load(sys.stdin)['n_prompt'] / 8)"
}
ERR=${TMPDIR:-/tmp}/ep_prefill.$$.err
run_one() {  # model text batch provider path -> "tok/s n_prompt path" ("0 ? failed" and the error on stderr)
  local out
  out=$("$L" run -m "$1" -p "$2" -n 1 --temp 0 --ignore-eos --nodes 2 -t 1 --provider "$4" --parallel ep \
    --ep-prefill "$5" --prefill-batch "$3" --json 2>"$ERR") || true
  if ! py "import json,sys; j=json.loads(sys.argv[1]); print(j['prefill_tok_s'], j['n_prompt'], j['ep_prefill']['path'])" \
       "$out" 2>/dev/null; then
    echo "0 ? failed"
    echo "$(basename "$1") $4 $5: $(tail -n 3 "$ERR" | tr '\n' ' ')" >&2
  fi
}
results=()
for M in $MODELS; do
  tps=$(per_sentence "$M")
  for n in $LENGTHS; do
    reps=$(py "import math; print(max(1, round($n / $tps)))")
    text=$(py "print('''$SENT''' * $reps, end='')")
    for P in $PROVIDERS; do
      for r in $(seq 1 "$ROUNDS"); do
        read -r red np pr <<<"$(run_one "$M" "$text" $((n + 64)) "$P" reduce)"
        read -r a2a _ pa <<<"$(run_one "$M" "$text" $((n + 64)) "$P" a2a)"
        echo "$(basename "$M") ~$n ($np tokens) $P round $r: reduce $red tok/s ($pr) | a2a $a2a tok/s ($pa) | a2a/reduce $(py "print('%.3f' % ($a2a / $red) if $red > 0 else 'n/a')")"
        py "import sys; sys.exit(0 if $red > 0 and $a2a > 0 else 1)" && results+=("$(basename "$M")|$np|$P|$(py "print($a2a / $red)")")
      done
    done
  done
done
echo "median a2a / reduce per cell:"
py "import statistics as s, sys, collections
c = collections.OrderedDict()
for r in sys.argv[1:]:
    m, n, p, v = r.split('|'); c.setdefault((m, n, p), []).append(float(v))
for (m, n, p), v in c.items(): print('  %s %s tokens %s: %.3f (%d rounds)' % (m, n, p, s.median(v), len(v)))" "${results[@]}"
