#!/usr/bin/env bash
# `lattice serve` against llama.cpp's llama-server, side by side in one run on the same GGUF,
# the same slots and threads, loaded by the same client (../shared/bench/peers/serve_load.py:
# N concurrent streaming chat requests, 128 tokens out, temperature 0) at 1, 4 and 8 clients.
# Prints each server's line per client count and the ratios lattice / llama-server (aggregate
# tok/s: higher is better; TTFT p50 and inter-token p50: lower is better).
#   bench/serve_vs_llama_server.sh LATTICE [LLAMA_SERVER] [ROUNDS]
# LLAMA_SERVER defaults to /tmp/lattice-peers/llama.cpp/build-srv/bin/llama-server (built by
# ../shared/bench/peers/build-llamacpp.sh server). Environment: MODEL (default the 1.1B Q4_0
# of bench/README: make-model --dim 2048 --layers 22 ...), SLOTS (8), THREADS (2), MAX_TOKENS
# (128), CLIENTS ("1 4 8"), NODES (1: lattice serve on one process; 2: --nodes 2, THREADS per
# rank), LOAD (the client script).
set -euo pipefail
L=$1
LS=${2:-/tmp/lattice-peers/llama.cpp/build-srv/bin/llama-server}
ROUNDS=${3:-1}
M=${MODEL:-/tmp/lattice-bench-models/tinyllama-q4_0.gguf}
SLOTS=${SLOTS:-8} THREADS=${THREADS:-2} MAX_TOKENS=${MAX_TOKENS:-128} CLIENTS=${CLIENTS:-1 4 8} NODES=${NODES:-1}
# llama-server gets every core lattice's ranks use together (2 ranks x 1 thread against -t 2).
LS_THREADS=${LS_THREADS:-$((NODES * THREADS))}
here=$(cd "$(dirname "$0")" && pwd)
LOAD=${LOAD:-$here/../../shared/bench/peers/serve_load.py}
[ -f "$LOAD" ] || LOAD=/work/shared/bench/peers/serve_load.py
[ -x "$L" ] || { echo "no lattice binary at $L"; exit 2; }
[ -x "$LS" ] || { echo "no llama-server at $LS (../shared/bench/peers/build-llamacpp.sh server)"; exit 2; }
[ -f "$M" ] || { echo "no model at $M: $L make-model --dim 2048 --layers 22 --heads 32 --kv-heads 4 --ffn 5632 --vocab 32000 --type q4_0 --seed 1 -o $M"; exit 2; }
CTX=8192  # llama-server's -c is shared by its slots: 8192 / SLOTS positions each
PER_SLOT=$(( CTX / SLOTS ))
out=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$out"; }
trap cleanup EXIT

free_port() { /usr/bin/python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"; }
# Waits (at most 300 s) until GET /health answers 200.
wait_health() {
  for _ in $(seq 1 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$1/health" || true)" = 200 ] && return 0
    kill -0 "$pid" 2>/dev/null || { echo "the server exited:"; tail -5 "$out/log"; return 1; }
    sleep 0.5
  done
  echo "the server did not become healthy in 300 s"; return 1
}
# One server: a warm-up request, then each client count; results in $out/NAME.C
load_all() {
  local name=$1 url=$2
  wait_health "$url"
  /usr/bin/python3 "$LOAD" "$url" 1 8 >/dev/null
  for c in $CLIENTS; do
    /usr/bin/python3 "$LOAD" "$url" "$c" "$MAX_TOKENS" "$ROUNDS" | tee "$out/$name.$c" | sed "s/^/$name: /"
  done
}

port=$(free_port)
if [ "$NODES" -gt 1 ]; then
  "$L" serve -m "$M" --port "$port" --slots "$SLOTS" -t "$THREADS" --ctx "$PER_SLOT" --nodes "$NODES" >"$out/log" 2>&1 &
else
  "$L" serve -m "$M" --port "$port" --slots "$SLOTS" -t "$THREADS" --ctx "$PER_SLOT" >"$out/log" 2>&1 &
fi
pid=$!
load_all lattice "http://127.0.0.1:$port"
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=

port=$(free_port)
LD_LIBRARY_PATH="$(dirname "$LS"):${LD_LIBRARY_PATH:-}" "$LS" -m "$M" --host 127.0.0.1 --port "$port" -t "$LS_THREADS" \
  -np "$SLOTS" -c "$CTX" >"$out/log" 2>&1 &
pid=$!
load_all llama-server "http://127.0.0.1:$port"
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=

echo "lattice ($NODES node(s) x $THREADS threads) / llama-server (-t $LS_THREADS -np $SLOTS -c $CTX), $MAX_TOKENS tokens out:"
for c in $CLIENTS; do
  /usr/bin/python3 - "$out/lattice.$c" "$out/llama-server.$c" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
def r(k):
    return "%.2fx" % (a[k] / b[k]) if a.get(k) and b.get(k) else "n/a"
print("  %d clients: agg tok/s %s (%s vs %s), ttft p50 %s (%s vs %s ms), itl p50 %s (%s vs %s ms), failed %d vs %d"
      % (a["clients"], r("agg_tok_s"), a["agg_tok_s"], b["agg_tok_s"], r("ttft_p50_ms"), a["ttft_p50_ms"],
         b["ttft_p50_ms"], r("itl_p50_ms"), a["itl_p50_ms"], b["itl_p50_ms"], a["failed"], b["failed"]))
EOF
done
