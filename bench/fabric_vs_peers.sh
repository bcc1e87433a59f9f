#!/usr/bin/env bash
# Side-by-side fabric benchmark: `lattice bench fabric` against the peers we compare with, in
# ONE run, alternating ours and the peer for every repetition, medians over REPS repetitions:
#
#   1 shm 8 B send/recv latency    vs UCX ucx_perftest tag_lat over shared memory   target ratio <= 2
#   2 shm 8 B write latency        absolute target <= 0.5 us (UCX ucp_put_lat shown for reference)
#   3 shm 1 MiB send/recv bw       vs UCX tag_bw over shared memory                  target ratio >= 0.9
#   4 shm 1 MiB write bw           vs single-thread memcpy of 1 MiB (tcp_pingpong)   target ratio >= 0.8
#   5 tcp loopback 8 B latency     vs raw busy-polling TCP ping-pong (tcp_pingpong)  target ratio <= 1.3
#   6 tcp loopback 1 MiB bw        vs one iperf3 stream (-t 3)                       target ratio >= 0.7
#
# Latency: one way (half the round trip), medians of per-iteration times (UCX: its 50th
# percentile). Bandwidth: GB/s = 1e9 bytes/s (UCX prints MB/s of 2^20 bytes; converted).
#
# Usage: bench/fabric_vs_peers.sh [--reps N] [--json] [--build DIR] [--only 1,2,...]
#        [--ours-flags "--busy-poll"] [--ucx-tls posix,sysv,cma,self]
# Installs ucx-utils and iperf3 with apt-get when missing. Every peer process it starts is
# killed on exit; every command runs under `timeout`.
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=5
JSON=0
BUILD=build
ONLY="1,2,3,4,5,6"
OURS_FLAGS=""
UCX_TLS_CHOICE="posix,sysv,cma,self"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --reps) REPS="$2"; shift 2 ;;
    --json) JSON=1; shift ;;
    --build) BUILD="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --ours-flags) OURS_FLAGS="$2"; shift 2 ;;
    --ucx-tls) UCX_TLS_CHOICE="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "fabric_vs_peers.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || { echo "fabric_vs_peers.sh: --reps needs a positive integer" >&2; exit 2; }

LATTICE="$BUILD/lattice"
[[ -x "$LATTICE" ]] || { echo "fabric_vs_peers.sh: $LATTICE not found; build first (scripts/build.sh)" >&2; exit 1; }

# --- tools -------------------------------------------------------------------------------------
missing=()
command -v ucx_perftest >/dev/null || missing+=(ucx-utils)
command -v iperf3 >/dev/null || missing+=(iperf3)
command -v python3 >/dev/null || missing+=(python3)
command -v cc >/dev/null || missing+=(gcc)
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "fabric_vs_peers.sh: installing ${missing[*]}" >&2
  apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
fi

TMP=$(mktemp -d /tmp/fabric_vs_peers.XXXXXX)
# Background peers are started inside $(...) subshells, so their pids go to a file. They run
# under `timeout`, which passes our TERM on to the peer.
cleanup() {
  if [[ -f "$TMP/pids" ]]; then
    while read -r p; do kill "$p" 2>/dev/null || true; done < "$TMP/pids"
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cc -O2 -o "$TMP/tcp_pingpong" bench/tcp_pingpong.c

PORT_BASE=$((20000 + RANDOM % 20000))
next_port() { PORT_BASE=$((PORT_BASE + 1)); echo "$PORT_BASE"; }
wait_listen() {  # port: wait until something listens on it (at most 10 s)
  for _ in $(seq 100); do
    ss -ltnH "sport = :$1" 2>/dev/null | grep -q . && return 0
    sleep 0.1
  done
  return 1
}
record() { echo "$3" >> "$TMP/$1.$2"; }   # figure, ours|peer, value
jq_num() { python3 -c 'import json,sys
k=sys.argv[1]
for line in sys.stdin:
    line=line.strip()
    if line.startswith("{"):
        v=json.loads(line).get(k)
        if v is not None: print(v)' "$1" | tail -1; }

# Ours: a bench fabric run; prints the value of json key $1.
ours() {
  local key=$1; shift
  timeout 120 "$LATTICE" bench fabric "$@" $OURS_FLAGS --json 2>>"$TMP/errors" | jq_num "$key"
}

# UCX ucx_perftest: server in the background, then the client; prints a CSV column:
# 2 = 50th percentile latency (us), 6 = overall bandwidth (MB/s of 2^20 bytes).
ucx() {
  local col=$1; shift
  local port; port=$(next_port)
  UCX_TLS=$UCX_TLS_CHOICE timeout 120 ucx_perftest -p "$port" "$@" >/dev/null 2>>"$TMP/errors" &
  local spid=$!
  echo "$spid" >> "$TMP/pids"
  wait_listen "$port" || { echo "ucx_perftest server did not start" >> "$TMP/errors"; kill "$spid" 2>/dev/null; return 0; }
  UCX_TLS=$UCX_TLS_CHOICE timeout 120 ucx_perftest 127.0.0.1 -p "$port" "$@" -f -v 2>>"$TMP/errors" |
    awk -F, -v c="$col" '/^[0-9]/ { v=$c } END { if (v != "") print v }'
  wait "$spid" 2>/dev/null || true
}

iperf() {  # one stream, 3 s; prints GB/s received
  local port; port=$(next_port)
  timeout 60 iperf3 -s -1 -p "$port" >/dev/null 2>>"$TMP/errors" &
  local spid=$!
  echo "$spid" >> "$TMP/pids"
  wait_listen "$port" || { kill "$spid" 2>/dev/null; return 0; }
  timeout 60 iperf3 -c 127.0.0.1 -p "$port" -t 3 -J 2>>"$TMP/errors" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8/1e9)'
  wait "$spid" 2>/dev/null || true
}

mib_to_gbps() { python3 -c 'import sys; v=sys.stdin.read().strip(); print(float(v)*1048576/1e9 if v else "")'; }

want() { [[ ",$ONLY," == *",$1,"* ]]; }

# --- the run ------------------------------------------------------------------------------------
START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for rep in $(seq "$REPS"); do
  echo "fabric_vs_peers.sh: repetition $rep of $REPS" >&2
  if want 1; then
    record 1 ours "$(ours lat_us_median --provider shm --op send --min 8 --max 8 --iters 100000 --warmup 10000 --measure lat)"
    record 1 peer "$(ucx 2 -t tag_lat -s 8 -n 100000 -w 10000)"
  fi
  if want 2; then
    record 2 ours "$(ours lat_us_median --provider shm --op write --min 8 --max 8 --iters 100000 --warmup 10000 --measure lat)"
    record 2 peer "$(ucx 2 -t ucp_put_lat -s 8 -n 100000 -w 10000)"
  fi
  if want 3; then
    record 3 ours "$(ours bw_gbps --provider shm --op send --min 1M --max 1M --measure bw --bw-time 1)"
    record 3 peer "$(ucx 6 -t tag_bw -s 1048576 -n 5000 -w 500 | mib_to_gbps)"
  fi
  if want 4; then
    record 4 ours "$(ours bw_gbps --provider shm --op write --min 1M --max 1M --measure bw --bw-time 1)"
    record 4 peer "$("$TMP/tcp_pingpong" memcpy -s 1M -t 1 | jq_num gbps)"
  fi
  if want 5; then
    record 5 ours "$(ours lat_us_median --provider tcp://127.0.0.1:0 --op send --min 8 --max 8 --iters 50000 --warmup 5000 --measure lat)"
    record 5 peer "$("$TMP/tcp_pingpong" lat -b -s 8 -n 50000 -w 5000 | jq_num lat_us_median)"
  fi
  if want 6; then
    record 6 ours "$(ours bw_gbps --provider tcp://127.0.0.1:0 --op send --min 1M --max 1M --measure bw --bw-time 3)"
    record 6 peer "$(iperf)"
  fi
done
END=$(date -u +%Y-%m-%dT%H:%M:%SZ)
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$TMP" "$JSON" "$START" "$END" "$COMMIT" "$REPS" "$LOAD0" "$LOAD1" "$OURS_FLAGS" "$UCX_TLS_CHOICE" <<'PY'
import json, os, statistics, sys, platform
tmp, as_json, start, end, commit, reps, load0, load1, flags, tls = sys.argv[1:]
figs = [
  # id, name, unit, peer name, kind (lat: lower is better; bw: higher), target
  ("1", "shm send/recv latency 8 B", "us", "UCX tag_lat (UCX_TLS=%s)" % tls, "lat", ("ratio", 2.0)),
  ("2", "shm write latency 8 B", "us", "UCX ucp_put_lat (reference)", "lat", ("abs", 0.5)),
  ("3", "shm send/recv bandwidth 1 MiB", "GB/s", "UCX tag_bw (UCX_TLS=%s)" % tls, "bw", ("ratio", 0.9)),
  ("4", "shm write bandwidth 1 MiB", "GB/s", "memcpy 1 MiB, 1 thread", "bw", ("ratio", 0.8)),
  ("5", "tcp loopback latency 8 B", "us", "busy-polling TCP ping-pong", "lat", ("ratio", 1.3)),
  ("6", "tcp loopback bandwidth 1 MiB", "GB/s", "iperf3, 1 stream", "bw", ("ratio", 0.7)),
]
def vals(fid, who):
    p = os.path.join(tmp, f"{fid}.{who}")
    if not os.path.exists(p): return None, []
    xs = []
    for line in open(p):
        line = line.strip()
        try: xs.append(float(line))
        except ValueError: pass
    return (statistics.median(xs) if xs else None), xs
rows = []
for fid, name, unit, peer, kind, (tkind, tval) in figs:
    if not os.path.exists(os.path.join(tmp, f"{fid}.ours")) and not os.path.exists(os.path.join(tmp, f"{fid}.peer")):
        continue
    o, ox = vals(fid, "ours"); p, px = vals(fid, "peer")
    ratio = (o / p) if (o is not None and p) else None
    if tkind == "abs":
        target = f"<= {tval} {unit}"
        met = None if o is None else o <= tval
    elif kind == "lat":
        target = f"ratio <= {tval}"
        met = None if ratio is None else ratio <= tval
    else:
        target = f"ratio >= {tval}"
        met = None if ratio is None else ratio >= tval
    # Also the median of the per-repetition ratios (each pair ran back to back): less sensitive
    # to load that drifts over the run.
    paired = [a / b for a, b in zip(ox, px) if b]
    rows.append(dict(figure=name, unit=unit, ours=o, peer=p, peer_name=peer, ratio=ratio, target=target,
                     met=met, ours_runs=ox, peer_runs=px,
                     paired_ratio=statistics.median(paired) if paired else None))
meta = dict(start=start, end=end, commit=commit, reps=int(reps), host=platform.node(), cpus=os.cpu_count(),
            loadavg_start=load0, loadavg_end=load1, ours_flags=flags)
if as_json == "1":
    print(json.dumps(dict(meta=meta, figures=rows), indent=1))
    sys.exit(0)
f = lambda v: "n/a" if v is None else (f"{v:.3f}" if v < 100 else f"{v:.1f}")
print(f"fabric vs peers: {start} .. {end}, commit {commit}, host {meta['host']} ({meta['cpus']} cpus), "
      f"medians of {reps} alternating runs, load average {load0} -> {load1}, ours flags '{flags}'")
print()
print("| figure | ours | peer | ratio ours/peer | target | met? |")
print("|---|---|---|---|---|---|")
for r in rows:
    met = "n/a" if r["met"] is None else ("yes" if r["met"] else "**no**")
    print(f"| {r['figure']} ({r['unit']}) | {f(r['ours'])} | {f(r['peer'])} ({r['peer_name']}) | {f(r['ratio'])} | {r['target']} | {met} |")
print()
print("runs (ours | peer | median of per-repetition ratios):")
for r in rows:
    print(f"  {r['figure']}: " + " ".join(f(v) for v in r["ours_runs"]) + " | " + " ".join(f(v) for v in r["peer_runs"]) +
          f" | {f(r['paired_ratio'])}")
PY
if [[ -s "$TMP/errors" ]]; then
  echo "--- stderr of the runs (last 20 lines) ---" >&2
  tail -20 "$TMP/errors" >&2
fi
