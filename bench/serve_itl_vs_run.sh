#!/usr/bin/env bash
# One `lattice serve` stream against `lattice run` on the same GGUF, the same prompt and the
# same threads (issue 15: inter-token latency within 5%), in alternating pairs on a machine
# that may be busy: each pair runs both, in A-B then B-A order, so drift hits both alike.
#   bench/serve_itl_vs_run.sh LATTICE [PAIRS]
# Both are timed the same way, by a reader process taking a timestamp at every piece of text
# it receives: the server's /v1/completions stream (stream true, ignore_eos, temperature 0)
# read from a raw socket, and `lattice run`'s stdout (it flushes every piece) read over a pipe. Each
# run gives the median and the mean gap between pieces after the first; the script prints
# every pair and the medians over the pairs, and the ratios serve / run. `lattice run`'s own
# report (its decode tok/s) is printed too. The server is idle (no CPU) while `run` runs.
# Environment: MODEL (default the 1.1B Q4_0 of bench/README), THREADS (2), MAX_TOKENS (128),
# SLOTS (8, as in bench/serve_vs_llama_server.sh), NODES (1; 2: lattice serve --nodes 2 with THREADS per rank, against run with NODES*THREADS).
set -euo pipefail
L=$1
PAIRS=${2:-5}
M=${MODEL:-/tmp/lattice-bench-models/tinyllama-q4_0.gguf}
THREADS=${THREADS:-2} MAX_TOKENS=${MAX_TOKENS:-128} NODES=${NODES:-1} SLOTS=${SLOTS:-8}
[ -x "$L" ] || { echo "no lattice binary at $L"; exit 2; }
[ -f "$M" ] || { echo "no model at $M: $L make-model --dim 2048 --layers 22 --heads 32 --kv-heads 4 --ffn 5632 --vocab 32000 --type q4_0 --seed 1 -o $M"; exit 2; }
exec /usr/bin/python3 - "$L" "$M" "$PAIRS" "$THREADS" "$MAX_TOKENS" "$NODES" "$SLOTS" <<'EOF'
import json, os, re, signal, socket, statistics, subprocess, sys, tempfile, time, urllib.request

L, M, PAIRS, T, N, NODES, SLOTS = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
PROMPT = "Request 0: tell me about clusters of machines and links."

def gaps(stamps):
    g = [(b - a) * 1e3 for a, b in zip(stamps, stamps[1:])]
    return (statistics.median(g), statistics.fmean(g), len(stamps)) if g else (None, None, len(stamps))

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def run_once():
    p = subprocess.Popen([L, "run", "-m", M, "-p", PROMPT, "-n", str(N), "-t", str(T * NODES), "--ignore-eos",
                          "--temp", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    stamps, fd, skip = [], p.stdout.fileno(), len(PROMPT.encode())
    while True:
        b = os.read(fd, 65536)
        if not b: break
        if skip > 0:  # the prompt is echoed first
            n = min(skip, len(b)); skip -= n; b = b[n:]
            if not b: continue
        if b.strip(b"\n") or b == b"\n": stamps.append(time.monotonic())
    err = p.stderr.read().decode(errors="replace"); p.wait()
    if p.returncode != 0: sys.exit("lattice run failed: " + err[-500:])
    m = re.search(r"generation: (\d+) tokens, ([\d.]+) tok/s", err)
    return gaps(stamps[:-1] if len(stamps) > 1 else stamps), (1e3 / float(m.group(2)) if m else None)

def serve_once(url):
    # A raw socket, as light a reader as run's pipe: a stamp at every recv that brings a piece
    # of text (the body is chunked SSE; each event with a non-empty "text" is one piece).
    body = json.dumps({"model": "m", "prompt": PROMPT, "max_tokens": N, "temperature": 0, "stream": True,
                       "ignore_eos": True}).encode()
    host, port = url.split("//")[1].split(":")
    s = socket.create_connection((host, int(port)), timeout=600)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    stamps, buf = [], b""
    while True:
        b = s.recv(65536)
        if not b: break
        now = time.monotonic()
        buf += b
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            at = ev.find(b"data: {")
            if at >= 0 and b'"text":""' not in ev[at:] and b'"text":' in ev[at:]: stamps.append(now)
    s.close()
    return gaps(stamps)

port = free_port()
log = tempfile.TemporaryFile()
cmd = [L, "serve", "-m", M, "--port", str(port), "--slots", str(SLOTS), "-t", str(T)] + (["--nodes", str(NODES)] if NODES > 1 else [])
srv = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)
url = "http://127.0.0.1:%d" % port
try:
    for _ in range(600):
        try:
            if urllib.request.urlopen(url + "/health", timeout=2).status == 200: break
        except Exception: pass
        if srv.poll() is not None: log.seek(0); sys.exit("the server exited: " + log.read().decode()[-500:])
        time.sleep(0.5)
    else: sys.exit("the server did not become healthy in 300 s")
    serve_once(url); run_once()  # warm-up: page cache, first-touch buffers
    rows = []
    for i in range(PAIRS):
        order = ("serve", "run") if i % 2 == 0 else ("run", "serve")
        r = {}
        for what in order:
            if what == "serve":
                r["serve"] = serve_once(url)
            else:
                os.killpg(srv.pid, signal.SIGSTOP)  # nothing of the server's may run meanwhile
                try: r["run"], r["run_report"] = run_once()
                finally: os.killpg(srv.pid, signal.SIGCONT)
        rows.append(r)
        print("pair %d (%s first): serve median %.2f mean %.2f ms (%d pieces) | run median %.2f mean %.2f ms (%d pieces; its report %.2f ms/token)"
              % (i + 1, order[0], *r["serve"], *r["run"], r["run_report"] or 0), flush=True)
    med = lambda k, j: statistics.median(r[k][j] for r in rows)
    sm, smean, rm, rmean = med("serve", 0), med("serve", 1), med("run", 0), med("run", 1)
    print("serve (%d node(s) x %d threads, %d slots) vs run (-t %d), %d tokens, medians over %d pairs:" % (NODES, T, SLOTS, T * NODES, N, PAIRS))
    print("  inter-token median: serve %.2f ms, run %.2f ms: %.3fx" % (sm, rm, sm / rm))
    print("  inter-token mean:   serve %.2f ms, run %.2f ms: %.3fx" % (smean, rmean, smean / rmean))
    print("  run's own report: %.2f ms/token" % statistics.median(r["run_report"] for r in rows if r["run_report"]))
finally:
    os.killpg(srv.pid, signal.SIGCONT); srv.terminate(); srv.wait(30)
EOF
