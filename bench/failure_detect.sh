#!/usr/bin/env bash
# Loss detection and continuation of the cluster: time from a fault to the moment EVERY survivor
# (the slowest counts) (1) received its peer-lost event (detect), (2) saw its receive in flight
# from the victim fail (inflight: the fabric acting on the cluster's verdict, or on its own
# peer_timeout, whichever came first), and (3) completed an exchange with every other survivor
# after shrink() (continue).
#
#   bench/failure_detect.sh [BUILD_DIR] [REPS]
#
# Faults (each on a fresh cluster of tests/cluster_peer ranks over tcp, REPS times, default 10):
#   kill   SIGKILL of rank 2 of 4 local processes (detected through EOF on its control link)
#   stop   SIGSTOP of rank 2 of 4 (detected by silence: failure_timeout, default 700 ms)
#   cut    `ip link set down` of rank 2's veth, 3 ranks in their own network namespaces joined
#          by a bridge (silence again); skipped without `ip netns`
# The time base is CLOCK_REALTIME: taken here just before the fault command, and by each
# survivor in its event callback (cluster_peer prints it). Prints the median, min and max.
set -euo pipefail
BUILD=${1:-build}
REPS=${2:-10}
PEER=$BUILD/tests/cluster_peer
[ -x "$PEER" ] || { echo "no $PEER: build the cluster_peer target" >&2; exit 2; }
TMP=$(mktemp -d)
NS_BASE="lfd$$"
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -CONT "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$NS_BASE" || true); do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
export LATTICE_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
unset LATTICE_SECRET_FILE

wait_for() {  # file pattern timeout_s
  local end=$((SECONDS + $3))
  until grep -q "$2" "$1" 2>/dev/null; do
    [ $SECONDS -lt $end ] || { echo "timeout waiting for '$2' in $1" >&2; cat "$1" >&2; return 1; }
    sleep 0.02
  done
}

# Starts `n` ranks; $1: n, $2: coordinator, $3..: optional "netns" to run rank i in ns i.
start_ranks() {
  local n=$1 coord=$2 mode=${3:-local}
  PIDS=()
  for ((r = 0; r < n; r++)); do
    local pre=()
    [ "$mode" = netns ] && pre=(ip netns exec "${NS_BASE}$r")
    LATTICE_RANK=$r LATTICE_WORLD_SIZE=$n LATTICE_COORDINATOR=$coord LATTICE_PROVIDER=tcp \
      "${pre[@]}" "$PEER" > "$TMP/out.$r" 2>"$TMP/err.$r" &
    PIDS+=($!)
  done
  for ((r = 0; r < n; r++)); do wait_for "$TMP/out.$r" ready 60; done
}

# Waits for every survivor's line matching $4; prints the slowest one's delay after $1 (ns) in
# microseconds (its "wall_ns T" field).
survivors_delay() {
  local t0=$1 n=$2 victim=$3 pattern=$4 worst=0
  for ((r = 0; r < n; r++)); do
    [ $r -eq $victim ] && continue
    wait_for "$TMP/out.$r" "$pattern" 30
    local t
    t=$(grep "$pattern" "$TMP/out.$r" | head -1 | sed 's/.*wall_ns \([0-9]*\).*/\1/')
    [ "$t" -gt "$worst" ] && worst=$t
  done
  echo $(((worst - t0) / 1000))
}

# One fault's three figures, appended to the arrays DETECT, INFLIGHT, CONTINUE.
measure() {  # t0 n victim
  DETECT+=("$(survivors_delay "$1" "$2" "$3" "event peer-lost")")
  INFLIGHT+=("$(survivors_delay "$1" "$2" "$3" "inflight failed peer $3")")
  CONTINUE+=("$(survivors_delay "$1" "$2" "$3" "exchange ok")")
}

report_all() {  # fault name
  report "$1 detect" "${DETECT[@]}"
  report "$1 inflight" "${INFLIGHT[@]}"
  report "$1 continue" "${CONTINUE[@]}"
  DETECT=() INFLIGHT=() CONTINUE=()
}
DETECT=() INFLIGHT=() CONTINUE=()

stop_ranks() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; kill -CONT "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  PIDS=()
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

report() {  # name, list of microseconds
  local name=$1; shift
  printf '%s\n' "$@" | sort -n | awk -v name="$name" '{v[NR]=$1} END {
    if (NR == 0) { printf "%-6s no samples\n", name; exit }
    m = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2
    printf "%-14s n=%d  median %.1f ms  min %.1f ms  max %.1f ms\n", name, NR, m/1000, v[1]/1000, v[NR]/1000 }'
}

run_local() {  # signal
  local sig=$1
  for ((i = 0; i < REPS; i++)); do
    start_ranks 4 "127.0.0.1:$(free_port)"
    local t0
    t0=$(date +%s%N)
    kill -"$sig" "${PIDS[2]}"
    measure "$t0" 4 2
    stop_ranks
  done
  report_all "$(echo "$sig" | tr A-Z a-z)"
}

setup_netns() {
  local hub=${NS_BASE}h
  ip netns add "$hub" || return 1
  ip -n "$hub" link add br0 type bridge && ip -n "$hub" link set br0 up
  for r in 0 1 2; do
    local ns=${NS_BASE}$r a=${NS_BASE}a$r b=${NS_BASE}b$r
    ip netns add "$ns"
    ip link add "$a" type veth peer name "$b"
    ip link set "$a" netns "$ns"; ip link set "$b" netns "$hub"
    ip -n "$ns" addr add "10.214.0.$((r + 1))/24" dev "$a"
    ip -n "$ns" link set "$a" up; ip -n "$ns" link set lo up
    ip -n "$hub" link set "$b" master br0; ip -n "$hub" link set "$b" up
  done
}

run_cut() {
  if ! setup_netns 2>/dev/null; then echo "cut    skipped: ip netns not permitted"; return; fi
  for ((i = 0; i < REPS; i++)); do
    ip -n "${NS_BASE}2" link set "${NS_BASE}a2" up
    start_ranks 3 "10.214.0.1:$((7400 + i))" netns
    local t0
    t0=$(date +%s%N)
    ip -n "${NS_BASE}2" link set "${NS_BASE}a2" down
    measure "$t0" 3 2
    stop_ranks
  done
  report_all cut
}

echo "loss: time from the fault to the last survivor's event (detect), to the failure of its receive in flight from the victim (inflight), and to its first exchange in the shrunk epoch (continue) (heartbeat ${LATTICE_HEARTBEAT_MS:-100} ms, timeout ${LATTICE_FAILURE_TIMEOUT_MS:-700} ms, $REPS reps)"
run_local KILL
run_local STOP
run_cut
