#!/usr/bin/env bash
# Same-run pairs of two lattice builds (e.g. the previous commit's and this one's): every figure
# the engine redesign must not regress, measured alternately OLD, NEW, OLD, NEW ... ROUNDS times
# on this machine, and reported as the median over the rounds of NEW/OLD (throughput) or
# OLD/NEW (latency), so >= 1 means NEW is at least as good.
#   bench/before_after.sh OLD_LATTICE NEW_LATTICE [ROUNDS]
# Figures: bench engine pp64/tg128 with 1 and 2 threads, run --nodes 2 (tensor parallel, 1
# thread a rank) decode tok/s over shm and tcp, bench coll all_reduce 2 ranks (8 B, 64 KiB,
# 1 MiB) over shm, bench fabric send over shm (8 B latency, 1 MiB bandwidth).
# The model is the 1.1B Llama shape in Q4_0 (made once with make-model into $MODELS_DIR).
set -euo pipefail
OLD=$1 NEW=$2 ROUNDS=${3:-5}
MODELS_DIR=${MODELS_DIR:-/tmp/lattice-bench-models}
M=$MODELS_DIR/tinyllama-q4_0.gguf
mkdir -p "$MODELS_DIR"
if [ ! -f "$M" ]; then
  "$NEW" make-model --arch llama --dim 2048 --layers 22 --heads 32 --kv-heads 4 --ffn 5632 --vocab 32000 \
    --type q4_0 --seed 1 -o "$M.tmp" >/dev/null && mv "$M.tmp" "$M"
fi
out=$(mktemp -d)
py() { /usr/bin/python3 -c "$@"; }
measure() {  # $1 = binary, $2 = tag; appends "metric value" lines to $out/$2
  local L=$1 f=$out/$2
  for t in 1 2; do
    "$L" bench engine -m "$M" -p 64 -n 128 -t $t -r 3 --json 2>/dev/null |
      py "import json,sys
for r in json.load(sys.stdin): print('engine_%s_t$t' % r['test'], r['avg_ts'])" >>"$f"
  done
  for p in shm tcp; do
    "$L" run -m "$M" -p "The cluster is one computer" -n 96 --temp 0 --ignore-eos --nodes 2 --provider $p --json 2>/dev/null |
      py "import json,sys; print('run_nodes2_$p', json.load(sys.stdin)['decode_tok_s'])" >>"$f"
  done
  "$L" bench coll --ranks 2 --provider shm --op all_reduce --min 8 --max 1M -f 2 --iters 200 --json 2>/dev/null |
    py "import json,sys
for l in sys.stdin:
  l=l.strip()
  if not l.startswith('{'): continue
  j=json.loads(l)
  if j['bytes'] in (8, 65536, 1048576): print('coll_allreduce_%dB_us' % j['bytes'], j['time_us_median'])" >>"$f"
  "$L" bench fabric --provider shm --op send --min 8 --max 1M -f 2 --iters 2000 --json 2>/dev/null |
    py "import json,sys
for l in sys.stdin:
  l=l.strip()
  if not l.startswith('{'): continue
  j=json.loads(l)
  if j['bytes']==8: print('fabric_send_8B_lat_us', j['lat_us_median'])
  if j['bytes']==1048576: print('fabric_send_1MiB_GBps', j['bw_gbps'])" >>"$f"
}
for r in $(seq 1 "$ROUNDS"); do
  measure "$OLD" old.$r
  measure "$NEW" new.$r
done
py "
import glob,statistics,collections
def load(p):
  d={}
  for l in open(p):
    k,v=l.split(); d[k]=float(v)
  return d
R=$ROUNDS
old=[load('$out/old.%d'%i) for i in range(1,R+1)]; new=[load('$out/new.%d'%i) for i in range(1,R+1)]
print('| figure | old (median) | new (median) | new vs old, median of %d same-run pairs |' % R)
print('| --- | ---: | ---: | ---: |')
for k in old[0]:
  lower_better = k.endswith('_us')
  ratios=[(o[k]/n[k] if lower_better else n[k]/o[k]) for o,n in zip(old,new) if k in n and n[k] and o[k]]
  if not ratios: continue
  print('| %s | %.3f | %.3f | %.3fx |' % (k, statistics.median(o[k] for o in old), statistics.median(n[k] for n in new if k in n), statistics.median(ratios)))
"
rm -rf "$out"
