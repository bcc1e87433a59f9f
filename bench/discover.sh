#!/usr/bin/env bash
# Discovery of N nodes, from the command's start to the topology file written (issue 19's
# target: under 2 s for 4 nodes). Needs root (network namespaces).
#
#   bench/discover.sh [-n 4] [-r 5] [--lattice build/lattice]
#
# Builds N namespaces on one bridge (in a hub namespace), each running
# `lattice discover --announce`, waits until they are all announced, then runs
# `lattice topo --discover --expect N -o F` from a further namespace on the bridge R times and
# prints each wall time and the median. Everything it made is removed on exit.
set -euo pipefail
n=4
reps=5
here=$(cd "$(dirname "$0")/.." && pwd)
lattice=$here/build/lattice
while [ $# -gt 0 ]; do
  case $1 in
    -n) n=$2; shift 2 ;;
    -r) reps=$2; shift 2 ;;
    --lattice) lattice=$2; shift 2 ;;
    *) echo "usage: $0 [-n N] [-r REPS] [--lattice PATH]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "$0: needs root (ip netns)" >&2; exit 2; }
tag=ldb$$
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for i in $(seq 0 "$n"); do ip netns del "$tag-$i" 2>/dev/null || true; done
  ip netns del "$tag-hub" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
"$lattice" keygen -o "$dir/secret" 2>/dev/null
ip netns add "$tag-hub"
ip -n "$tag-hub" link add br0 type bridge
ip -n "$tag-hub" link set br0 up
# Namespace 0 runs the command; 1..n are the nodes.
for i in $(seq 0 "$n"); do
  ns=$tag-$i
  ip netns add "$ns"
  ip link add "$tag-v$i" type veth peer name "$tag-h$i"
  ip link set "$tag-v$i" netns "$ns"
  ip link set "$tag-h$i" netns "$tag-hub"
  ip -n "$ns" link set "$tag-v$i" name eth0
  ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  ip -n "$tag-hub" link set "$tag-h$i" master br0
  ip -n "$tag-hub" link set "$tag-h$i" up
done
for i in $(seq 1 "$n"); do
  ip netns exec "$tag-$i" "$lattice" discover --announce --name "node$i" --secret-file "$dir/secret" \
    >"$dir/announce$i.log" 2>&1 &
  pids+=($!)
done
# Ready when every node printed its "announcing" line (registered on the network).
for _ in $(seq 1 100); do
  ready=$({ grep -l '^announcing' "$dir"/announce*.log 2>/dev/null || true; } | wc -l)
  [ "$ready" -ge "$n" ] && break
  sleep 0.1
done
[ "$ready" -ge "$n" ] || { echo "$0: only $ready of $n nodes announced" >&2; cat "$dir"/announce*.log >&2; exit 1; }
times=()
for r in $(seq 1 "$reps"); do
  t0=$(date +%s.%N)
  ip netns exec "$tag-0" "$lattice" topo --discover --expect "$n" --secret-file "$dir/secret" -o "$dir/cluster.json" \
    >"$dir/topo.log" 2>&1 || { cat "$dir/topo.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  t=$(echo "$t1 - $t0" | bc -l)
  times+=("$t")
  printf 'run %d: %.3f s\n' "$r" "$t"
done
median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}')
printf 'discovery of %d nodes to the topology file written: median %.3f s over %d runs\n' "$n" "$median" "$reps"
cat "$dir/topo.log"
