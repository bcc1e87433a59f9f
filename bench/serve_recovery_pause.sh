#!/usr/bin/env bash
# A rank killed during 8 streams on 3 ranks (issue 15): the longest pause a stream sees across
# the recovery, over RUNS runs of tests/serve's AFollowerKilledDuringEightStreamsOnThreeRanks
# (real rank processes; every stream must complete and match one process up to a near-tie).
#   bench/serve_recovery_pause.sh BUILD_DIR [RUNS]
# Prints each run's pause and their median and maximum.
set -euo pipefail
B=${1:-build}
RUNS=${2:-5}
T=$B/tests/serve_tests
[ -x "$T" ] || { echo "no $T (cmake --build $B --target serve_tests lattice)"; exit 2; }
pauses=()
for i in $(seq 1 "$RUNS"); do
  out=$("$T" --gtest_filter='ServeClusterProcess.AFollowerKilledDuringEightStreamsOnThreeRanks' 2>&1) || {
    echo "run $i failed:"; echo "$out" | tail -20; exit 1; }
  p=$(echo "$out" | sed -n 's/^longest pause of a stream across the recovery: \([0-9]*\) ms.*/\1/p')
  [ -n "$p" ] || { echo "run $i printed no pause"; exit 1; }
  echo "run $i: longest pause across the recovery $p ms"
  pauses+=("$p")
done
printf '%s\n' "${pauses[@]}" | sort -n | awk '{a[NR]=$1} END {printf "over %d runs: median %d ms, max %d ms\n", NR, a[int((NR+1)/2)], a[NR]}'
