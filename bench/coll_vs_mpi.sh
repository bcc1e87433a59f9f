#!/usr/bin/env bash
# All-reduce latency, lattice vs OpenMPI, side by side in one run on this machine.
#
#   bench/coll_vs_mpi.sh [BUILD_DIR]      (default: build; needs BUILD_DIR/lattice)
#   env: TRANSPORTS="shm tcp tcp-plain" RANKS=4 REPS=3 MIN=8 MAX_SHM=16777216 MAX_TCP=16777216 ITERS=100 SETTLE=1 ALGO=auto
#
# Both sides: f32 sum, out of place, one process per rank, untimed warm-up by count and time
# (at least 20 ms per size, 200 ms for the first), then
# `iters` calls each timed; an iteration costs its slowest rank's time; the median over
# iterations is one run's figure. Runs alternate (ours, theirs) REPS times per transport, with
# SETTLE seconds between runs (so one side's exiting processes never overlap the other's), and
# the table shows the median of the runs' medians and the ratio ours/theirs (< 1: we are
# faster). OpenMPI: Debian's openmpi-bin, btl self,vader (shared memory) or self,tcp, with
# --oversubscribe (this box has 2 cores) and a small OSU-style program (bench/coll_mpi_bench.c).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
lattice=$build/lattice
RANKS=${RANKS:-4} REPS=${REPS:-3} ITERS=${ITERS:-100} MIN=${MIN:-8} SETTLE=${SETTLE:-1} ALGO=${ALGO:-auto}
MAX_SHM=${MAX_SHM:-16777216} MAX_TCP=${MAX_TCP:-16777216}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$lattice" ] || { echo "no $lattice (build the lattice target)" >&2; exit 2; }
command -v mpicc >/dev/null || { echo "mpicc missing: apt-get install openmpi-bin libopenmpi-dev" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpicc -O2 -o "$work/coll_mpi_bench" "$here/coll_mpi_bench.c"

run_ours() {  # provider max [--insecure] -> "bytes median_us" lines
  "$lattice" bench coll --procs ${3:-} --ranks "$RANKS" --provider "$1" --op all_reduce --min "$MIN" --max "$2" \
    --algo "$ALGO" --iters "$ITERS" --json 2>/dev/null |
    sed -n 's/^\[rank 0\] //p' | python3 -c '
import json, sys
for line in sys.stdin:
    j = json.loads(line); print(j["bytes"], j["time_us_median"], j["algo"])'
}
run_mpi() {  # btl max
  mpirun --oversubscribe -n "$RANKS" --mca btl "$1" "$work/coll_mpi_bench" "$MIN" "$2" "$ITERS" 10 2>/dev/null |
    awk '{print $1, $2}'
}

for transport in ${TRANSPORTS:-shm tcp tcp-plain}; do
  # tcp: lattice as it runs by default, every frame sealed (AES-256-GCM); tcp-plain: with
  # --insecure (authenticated, not encrypted), like OpenMPI's tcp btl.
  provider=$transport extra=""
  if [ "$transport" = tcp-plain ]; then provider=tcp extra=--insecure; fi
  if [ "$transport" = shm ]; then btl=self,vader; max=$MAX_SHM; else btl=self,tcp; max=$MAX_TCP; fi
  for rep in $(seq "$REPS"); do
    run_ours "$provider" "$max" "$extra" > "$work/ours.$transport.$rep"
    sleep "$SETTLE"
    run_mpi "$btl" "$max" > "$work/mpi.$transport.$rep"
    sleep "$SETTLE"
  done
  echo "## all_reduce f32 sum, $RANKS ranks, $transport (lattice --provider $provider $extra vs OpenMPI btl $btl), median of $REPS runs; load: $(cut -d' ' -f1-3 /proc/loadavg)"
  python3 - "$work" "$transport" "$REPS" <<'PY'
import statistics, sys
work, tr, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
def load(kind):
    runs = {}
    for r in range(1, reps + 1):
        for line in open(f"{work}/{kind}.{tr}.{r}"):
            f = line.split()
            runs.setdefault(int(f[0]), []).append((float(f[1]), f[2] if len(f) > 2 else ""))
    return runs
ours, theirs = load("ours"), load("mpi")
print(f"{'bytes':>10} {'lattice us':>11} {'algo':>8} {'OpenMPI us':>11} {'ratio':>7}")
for b in sorted(set(ours) & set(theirs)):
    o = statistics.median(t for t, _ in ours[b]); m = statistics.median(t for t, _ in theirs[b])
    print(f"{b:>10} {o:>11.2f} {ours[b][0][1]:>8} {m:>11.2f} {o / m:>7.2f}")
PY
done
