#!/usr/bin/env bash
# CPU an idle cluster costs: 4 tests/cluster_peer ranks over tcp (rank 0 hosts the
# coordinator) that joined and then do nothing ("--idle"), measured from /proc/PID/stat
# (utime + stime, what getrusage reports) over WINDOW seconds in three states:
#   idle           all 4 ranks alive (heartbeats every 100 ms both ways)
#   after a loss   rank 3 SIGKILLed, nobody shrinks: the coordinator keeps its dead connection
#   no coordinator rank 0 (the coordinator's host) SIGKILLed too: ranks 1-2 lost it for good
# Prints the CPU of each state summed over the ranks still running, in % of one core.
#
#   bench/idle_cpu.sh [BUILD_DIR] [WINDOW_S]
set -euo pipefail
BUILD=${1:-build}
WINDOW=${2:-5}
PEER=$BUILD/tests/cluster_peer
[ -x "$PEER" ] || { echo "no $PEER: build the cluster_peer target" >&2; exit 2; }
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
export LATTICE_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
unset LATTICE_SECRET_FILE
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
for r in 0 1 2 3; do
  LATTICE_RANK=$r LATTICE_WORLD_SIZE=4 LATTICE_COORDINATOR=127.0.0.1:$PORT LATTICE_PROVIDER=tcp \
    "$PEER" --idle > "$TMP/out.$r" 2> "$TMP/err.$r" &
  PIDS+=($!)
done
for r in 0 1 2 3; do
  end=$((SECONDS + 60))
  until grep -q ready "$TMP/out.$r" 2>/dev/null; do
    [ $SECONDS -lt $end ] || { echo "rank $r never got ready" >&2; cat "$TMP/err.$r" >&2; exit 1; }
    sleep 0.05
  done
done
ticks() {  # pids... -> summed utime+stime in clock ticks
  local sum=0
  for p in "$@"; do
    local f
    f=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null) || continue
    set -- $f
    sum=$((sum + ${12} + ${13}))
  done
  echo $sum
}
HZ=$(getconf CLK_TCK)
state() {  # name pids...
  local name=$1; shift
  sleep 1  # let the state settle (detection takes ~0.7 s)
  local a b
  a=$(ticks "$@"); sleep "$WINDOW"; b=$(ticks "$@")
  awk -v n="$name" -v t=$((b - a)) -v hz="$HZ" -v w="$WINDOW" -v k=$# \
    'BEGIN { printf "%-15s %d rank(s)  %.2f%% of one core\n", n, k, 100 * t / hz / w }'
}
state idle "${PIDS[@]}"
kill -9 "${PIDS[3]}"; wait "${PIDS[3]}" 2>/dev/null || true
state "after a loss" "${PIDS[0]}" "${PIDS[1]}" "${PIDS[2]}"
kill -9 "${PIDS[0]}"; wait "${PIDS[0]}" 2>/dev/null || true
state "no coordinator" "${PIDS[1]}" "${PIDS[2]}"
