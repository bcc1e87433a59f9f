#!/usr/bin/env python3
"""The simulator against real runs on this machine (docs/SIM.md, "Validation").

Calibrates this machine (`lattice sim --calibrate`: read bandwidth, matmul throughput, the shm and
tcp links), runs the predicted model on one rank (`lattice run`, the command of every other row
without --nodes) and calibrates the engine's decode and prefill efficiencies on that model's own
one-rank figures (`lattice sim --calibrate-from`, as the published validation fits each model at its
smallest node count); then for each rank count, parallel mode and provider runs `run --nodes N`
(processes on this machine) and asks `lattice sim` for the same configuration (a topology of N hosts
at 127.0.0.1 sharing this machine): those rows come from the link, schedule and placement models,
nothing fitted to them. Prints a table (or --json) with the measured and predicted decode and
prefill tok/s and the errors. Not a timed test: the machine is shared; the lead re-runs it on a
quiet one.

  bench/sim_vs_real.py [--build build] [--ranks 1,2,3,4] [--modes tp,pp] [--providers shm,tcp,tcp-emu,verbs-emu]
                       [--shape 1.1b|small|moe | --model FILE.gguf] [--machine FILE] [--n 64] [--json]

Providers tcp-emu and verbs-emu are emulated links of --link-latency-us / --link-gbytes-s (default
50 us, 1 GB/s): the ranks run over tcp?latency_us=L&gbytes_s=R (a relay in front of each listener,
fabric/tcp/link_emu.h) or verbs-emu://apple-tb5?latency_us=L&gbytes_s=R (the emulated RDMA device's
wire, fabric/verbs/emu/emu.h), and the simulator's topology gives every link those figures
("latency_us": L, "gbps": 8 R). --machine reuses a calibration (written by an earlier run).

--adjacent measures each row's calibration (one-rank runs, a co-run pair) beside each of its runs;
--interleave runs them in turns with a tensor-parallel row's run, phase by phase, where the row's
ranks are pinned (docs/SIM.md, sessions 26-27); --bind cores (the default) pins them beyond the
cores too, as the simulator places them.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

SHAPES = {
    # the 1.1B Llama bench shape (ANCHORS.md)
    "1.1b": ["--arch", "llama", "--dim", "2048", "--layers", "22", "--heads", "32", "--kv-heads", "4",
             "--ffn", "5632", "--vocab", "32000", "--type", "q4_0"],
    "small": ["--arch", "llama", "--dim", "1024", "--layers", "8", "--heads", "16", "--kv-heads", "4",
              "--ffn", "2816", "--vocab", "8000", "--type", "q4_0"],
    "moe": ["--arch", "qwen3moe", "--dim", "1024", "--layers", "8", "--heads", "16", "--kv-heads", "4",
            "--experts", "16", "--experts-used", "4", "--expert-ffn", "512", "--vocab", "8000", "--type", "q4_0"],
}


def sh(args, timeout=900):
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        # What it printed before failing too: a calibration's lines say how far it got.
        sys.exit(f"{' '.join(args)} failed ({r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return r.stdout


def model(lattice, work, name):
    path = os.path.join(work, f"{name}.gguf")
    if not os.path.exists(path):
        sh([lattice, "make-model", *SHAPES[name], "-o", path])
    return path


def run_provider(prov, a):
    """The --provider word of `lattice run` for a provider of the table."""
    q = f"latency_us={a.link_latency_us:g}&gbytes_s={a.link_gbytes_s:g}"
    return {"tcp-emu": f"tcp?{q}", "verbs-emu": f"verbs-emu://apple-tb5?{q}"}.get(prov, prov)


def topology(work, n, provider, machine, a):
    if provider == "verbs-emu":
        # The emulated device gives every QP a wire of its own, as every Thunderbolt port of an
        # Apple machine has its own bus: this machine with a port per peer.
        m = json.load(open(machine))
        m["tb5_ports"] = max(1, n - 1)
        machine = os.path.join(work, "this-machine-tb5.json")
        with open(machine, "w") as f:
            json.dump(m, f)
    hosts = [{"name": f"r{i}", "address": f"127.0.0.1:{7100 + i}", "machine": machine} for i in range(n)]
    links = []
    for i in range(n):
        for j in range(i + 1, n):
            link = {"a": f"r{i}", "b": f"r{j}", "provider": {"tcp-emu": "tcp", "verbs-emu": "verbs"}.get(provider, provider)}
            if provider in ("tcp-emu", "verbs-emu"):
                link["latency_us"] = a.link_latency_us
                link["gbps"] = 8 * a.link_gbytes_s
            if provider == "verbs-emu":
                link["a_device"], link["b_device"] = f"emu_tb5_{j}", f"emu_tb5_{i}"
            links.append(link)
    path = os.path.join(work, f"local-{n}-{provider}.json")
    with open(path, "w") as f:
        json.dump({"version": 1, "hosts": hosts, "links": links}, f)
    return path


def median_run(ms):
    """(decode tok/s, prefill tok/s, JSON) runs -> the median decode (and its run's JSON), the median
    prefill. The median, not the best: a row of 2-4 rank processes is as slow as its slowest core at
    each moment, a one-rank run as its one core, so the best of a few runs favours the one-rank
    runs (session 17: every pipeline row read 3-16% below the best one-rank run beside it, where a
    quiet pair read the two alike)."""
    by_decode = sorted(ms, key=lambda m: m[0])
    mid = by_decode[len(ms) // 2]
    return mid[0], sorted(m[1] for m in ms)[len(ms) // 2], mid[2]


def usable_cpus():
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def rank_cpus(n):
    """The CPU each of n ranks of `run --nodes n` starts on, as lattice launch pins them
    (cluster::bind_cpus: a block of CPUs each while they fit, the first of each block here; beyond
    the CPUs unpinned, so every CPU)."""
    cpus = usable_cpus()
    if not cpus:
        return []
    if n > len(cpus):
        return cpus
    block = len(cpus) // n
    return [cpus[r * block] for r in range(n)]


def pin_cpus(n, a):
    """With --pin-alone on a machine of several CPUs, the CPUs to pin one-rank runs to for a row
    of n ranks (rank_cpus); otherwise n times None (unpinned)."""
    return rank_cpus(n) if a.pin_alone and len(usable_cpus()) > 1 else [None] * n


def pinned(cmd, cpu):
    return cmd if cpu is None else ["taskset", "-c", str(cpu)] + cmd


def measure(lattice, target, prompt, n, mode, prov, a, reps=None, cpu=None):
    """The median of --reps runs: (decode tok/s, prefill tok/s, the median decode run's JSON)."""
    runs = []
    for _ in range(reps or a.reps):
        cmd = one_rank_cmd(lattice, target, prompt, a)[:-4]
        if n > 1:
            cmd += row_flags(n, mode, prov, a)
        else:
            # One rank through the distributed rows' own path (generate_distributed), which
            # reports the forward steps' share of a token (ranks[].step_ms_per_token). (Session
            # 10 read the single-node `run` 2.6x slower on the MoE bench model; session 13, quiet,
            # read both at 15.9 / 15.3 tok/s on one thread: not reproduced.)
            cmd += ["--nodes", "1", "--provider", "shm"]
        j = json.loads(sh(pinned(cmd, cpu)))
        runs.append((j["decode_tok_s"], j["prefill_tok_s"], j))
    return median_run(runs)


def averaged_one_rank(j0, j1):
    """Two one-rank runs (`run --json`) -> one calibration point between them: rates and each
    token's times averaged (a row run between the two is calibrated on the machine's speed at its
    side, not on one run before it)."""
    j = dict(j0)
    for k in ("decode_tok_s", "prefill_tok_s"):
        j[k] = (j0[k] + j1[k]) / 2
    r0, r1 = j0["ranks"][0], j1["ranks"][0]
    j["ranks"] = [dict(r0, **{k: (r0[k] + r1[k]) / 2 for k in ("decode_ms_per_token", "step_ms_per_token",
                                                               "prefill_step_ms") if k in r0 and k in r1})]
    return j


def saved_rounds(manifest, tag, a):
    """--repredict: the rounds of the last measured table (the same runs and calibrations), to be
    predicted again; with --pool, the same row's rounds from each kept table too (--keep), their
    files read from that table's folder. Each round keeps its own calibration."""
    rounds = []
    for folder in [None] + a.pool:
        def here(f):  # a file the manifest names, in the folder it is read from
            return f if folder is None else os.path.join(folder, os.path.basename(f))
        try:
            saved = json.load(open(here(manifest)))
        except (OSError, ValueError) as e:
            raise SystemExit(f"--repredict: no saved rounds for {tag} ({e})")
        rounds += [((r["decode_tok_s"], r["prefill_tok_s"], r["run"]), here(r["one_rank"]), here(r["machine"]))
                   for r in saved]
    return rounds


def keep_rounds(manifest, a):
    """--keep DIR: a measured row's rounds (its manifest and every round's one-rank and machine
    files) copied into DIR, for --pool to predict them again beside another table's."""
    if not a.keep:
        return
    os.makedirs(a.keep, exist_ok=True)
    shutil.copy(manifest, a.keep)
    for r in json.load(open(manifest)):
        for f in (r["one_rank"], r["machine"]):
            shutil.copy(f, a.keep)


def round_files(lattice, work, target, machine, tag, i, one_rank_json, figures, how):
    """A round's calibration as files: its one-rank run, and the machine file raised to that run's
    rate with `figures` (with_scaling) set; (one-rank file, machine file)."""
    one_rank = os.path.join(work, f"one-rank-{tag}-{i}.json")
    with open(one_rank, "w") as f:
        json.dump(one_rank_json, f)
    m, _ = raise_machine(lattice, work, target, machine, one_rank_json["decode_tok_s"],
                         f"this-machine-raised-{tag}-{i}.json")
    if figures:
        m, _ = with_scaling(work, m, figures, how, f"this-machine-corun-{tag}-{i}.json")
    if m == machine:
        # The round's own copy: the shared file is rewritten by the next table (or a rerun of
        # some rows), and --repredict must read what this round was predicted with.
        m = os.path.join(work, f"this-machine-{tag}-{i}.json")
        shutil.copyfile(machine, m)
    return one_rank, m


def adjacent(lattice, work, target, label, machine, prompt, n, mode, prov, a):
    """--adjacent: the row's calibration measured beside each of its runs. A host whose speed
    drifts within seconds (docs/SIM.md, session 22: one rank 27-35 ms a token, the slower copy of a
    co-run 35-46 ms, in three rounds a minute apart) leaves a calibration taken minutes before a run
    wrong by more than the bound. So --reps rounds, each a one-rank run, for tensor parallel a
    co-run pair (two one-rank runs at once: the slower copy's step against the one-rank runs on
    either side), then the row's run, with a one-rank run after the last: every row run sits
    between the two one-rank runs it is calibrated on, right after its co-run. Returns a list of
    (the row's run (decode tok/s, prefill tok/s, JSON), one-rank JSON file, machine file), one a
    round; nothing in them comes from a multi-rank run but the measured row."""
    tag = f"{label}-{n}-{mode}-{prov}"
    manifest = os.path.join(work, f"rounds-{tag}.json")
    if a.repredict:
        return saved_rounds(manifest, tag, a)
    # The one-rank runs on the CPUs the row's ranks run on, in turn (a VM's vCPUs differ: on
    # session 23's host one rank read 20% slower pinned to CPU 0 than to CPU 1 for minutes at a
    # time, and an unpinned rank ran on the faster), so each round's two sides are two of them.
    cpus = pin_cpus(n, a)
    alone = [measure(lattice, target, prompt, 1, "-", "-", a, reps=1, cpu=cpus[0])]
    pairs, runs = [], []
    for i in range(a.reps):
        if mode == "tp":
            pairs.append(co_run_pair(lattice, target, prompt, machine, a))
        runs.append(measure(lattice, target, prompt, n, mode, prov, a, reps=1))
        alone.append(measure(lattice, target, prompt, 1, "-", "-", a, reps=1, cpu=cpus[(i + 1) % len(cpus)]))
    rounds = []
    for i, run in enumerate(runs):
        j = averaged_one_rank(alone[i][2], alone[i + 1][2])
        figures = {}
        if pairs and pairs[i]:
            alone_i = j["ranks"][0]
            step, prefill = pairs[i]
            figures = {"kernel_scaling": alone_i["step_ms_per_token"] / step,
                       "compute_scaling": alone_i.get("prefill_step_ms", 0) / prefill if prefill > 0 else 0}
        one_rank, m = round_files(lattice, work, target, machine, tag, i, j, figures,
                                  "the slower of two copies of this model's decode (kernel_scaling) and prefill "
                                  "(compute_scaling) on both cores at once against the one-rank runs on either "
                                  "side, beside the row's run")
        rounds.append((run, one_rank, m))
    with open(manifest, "w") as f:
        json.dump([{"decode_tok_s": r[0][0], "prefill_tok_s": r[0][1], "run": r[0][2], "one_rank": r[1], "machine": r[2]}
                   for r in rounds], f)
    keep_rounds(manifest, a)
    return rounds


def row_flags(n, mode, prov, a):
    """`lattice run`'s flags of a row of n > 1 ranks. --bind cores: beyond the cores, rank r on CPU
    r mod CPUs, the placement the simulator takes (each core's ranks in turns: 3 on 2 cores two to
    one); unpinned, the scheduler spread 3 ranks over 2 cores at 1.06-1.35 x the pace of 2 from
    run to run (docs/SIM.md, sessions 26-27). Within the cores both bind a rank a CPU."""
    return ["--nodes", str(n), "--provider", run_provider(prov, a), "--parallel", mode, "--bind", a.bind]


def run_cmd(lattice, target, prompt, n, mode, prov, a, tokens):
    """`lattice run` of a row (n > 1) or of one rank, `tokens` generated."""
    cmd = one_rank_cmd(lattice, target, prompt, a)[:-4]
    cmd[cmd.index("-n") + 1] = str(tokens)
    if n > 1:
        return cmd + row_flags(n, mode, prov, a)
    return cmd + ["--nodes", "1", "--provider", "shm"]


class Job:
    """A `lattice run` started now and held or let go by its launcher (SIGTSTP stops the whole job,
    launcher and ranks together, and SIGCONT resumes it: cluster/launcher.cc, stop_job; the
    failure detectors forgive a stop every process saw, and the deadline does not count it)."""

    def __init__(self, cmd, cpu=None):
        # taskset execs the launcher in place: the process started is the job's launcher.
        env = dict(os.environ, LATTICE_FAILURE_TIMEOUT_MS="120000")
        self.p = subprocess.Popen(pinned(cmd, cpu), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.out = self.err = None

    def alive(self):
        return self.p.poll() is None

    def state(self):
        try:
            with open(f"/proc/{self.p.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return "?"

    def stop(self):
        """Stops the job and returns once its launcher is stopped (it stops its ranks first): a
        SIGCONT sent while the launcher has yet to act on the SIGTSTP would be lost, and the job
        left stopped."""
        if not self.alive():
            return
        os.kill(self.p.pid, signal.SIGTSTP)
        deadline = time.monotonic() + 5
        while self.alive() and self.state() not in ("T", "t") and time.monotonic() < deadline:
            time.sleep(0.002)

    def go(self):
        if self.alive():
            os.kill(self.p.pid, signal.SIGCONT)

    def end(self):
        """Ends the job if it still runs (resumed first: a stopped launcher acts on SIGTERM only
        once resumed, and stops its ranks)."""
        if self.alive():
            os.kill(self.p.pid, signal.SIGCONT)
            self.p.terminate()
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(timeout=30)

    def report(self):
        if self.out is None:
            self.out, self.err = self.p.communicate(timeout=900)
        if self.p.returncode != 0:
            sys.exit(f"interleaved run failed ({self.p.returncode}):\n{self.err[-2000:]}")
        return json.loads(self.out)


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else 0.0


def in_windows(j, windows, margin):
    """A run's pace inside `windows` ((start, end) on the monotonic clock, s), the first `margin`
    s of each left out (the job resuming, its token under way when it stopped finishing): the
    tokens chosen in them over their time, as ms a token (a count, not the median or mean of the
    token-to-token times, which would favour short ones: a long token is the likelier to straddle
    a stop and be left out), and the median index of those tokens; (0, 0) without any."""
    ts = [t / 1000 for t in j["token_clock_ms"]]
    count, seconds, at = 0, 0.0, []
    for w0, w1 in windows:
        got = [i for i, t in enumerate(ts) if w0 + margin < t <= w1]
        count += len(got)
        seconds += max(0.0, w1 - w0 - margin)
        at += got
    return (1000 * seconds / count, int(median(at))) if count else (0.0, 0)


def interleaved(lattice, work, target, label, machine, prompt, n, mode, prov, a, m1):
    """--interleave: the row's run and its calibration in turns, not one after the other. Three
    jobs start at once: the row's run, and one rank pinned to each of the first two CPUs; their
    launchers are then stopped and resumed (SIGTSTP / SIGCONT) so that in each cycle of four
    --window seconds phases the row's run has the machine alone, then each one-rank run alone, then
    (tensor parallel) the two one-rank runs together, the co-run pair. Each job's token times
    (run --json, token_clock_ms) inside its phases give its pace there; a cycle's four phases lie
    within a few seconds, shorter than this host's drift (docs/SIM.md, session 26: the row's ratio
    to its calibration 0.97-1.06 over ten cycles, where runs ten seconds apart moved it by +-20%).
    Before the cycles each job runs alone for --warmup seconds (loading, its prefill). A process
    prefills once, so the prefill of each round is measured apart, after the cycles: whole runs
    of a token or two, alone, a one-rank run before and after each of the row's, --prefill-runs
    of the row's a round and their median (docs/SIM.md, session 32: the warm-up's one prefill,
    shared by every round, read the Llama's 3 ranks over tcp at 219 / 221 / 120 tok/s in three
    tables; session 33: one run a round let a slow start make the round). The cycles are cut
    into --reps rounds, each predicted from its own phases and prefills; returns adjacent()'s
    rounds."""
    tag = f"{label}-{n}-{mode}-{prov}"
    manifest = os.path.join(work, f"rounds-{tag}.json")
    if a.repredict:
        return saved_rounds(manifest, tag, a)
    cpus = pin_cpus(2, a) if len(usable_cpus()) > 1 else [None]
    cores = max(1, json.load(open(machine)).get("cores", 1))
    corun = mode == "tp" and len(cpus) > 1 and cores >= 2
    # Tokens enough for every job to outlast its warm-up and phases, at the fastest it could go
    # (the one-rank run's pace over as many ranks as cores), with room; at most 1500.
    ms1 = 1000 / m1[0]
    row_tokens = min(1500, int((a.cycles * a.window + a.warmup) * 1150 / (ms1 / min(n, cores))) + 16)
    one_tokens = min(1500, int((a.cycles * a.window * (2 if corun else 1) + a.warmup) * 1150 / ms1) + 16)
    # Warm-up: each job alone, in turn, started then (so that it loads alone).
    jobs = {}
    try:
        for k, cpu in [("row", None)] + [(f"cpu{i}", c) for i, c in enumerate(cpus)]:
            jobs[k] = Job(run_cmd(lattice, target, prompt, n, mode, prov, a, row_tokens) if k == "row"
                          else run_cmd(lattice, target, prompt, 1, "-", "-", a, one_tokens), cpu)
            time.sleep(a.warmup)
            jobs[k].stop()
        phases = [("row",)] + [(f"cpu{i}",) for i in range(len(cpus))] + ([("cpu0", "cpu1")] if corun else [])
        windows = []  # (cycle, phase, start, end, every job alive)
        cycle = 0
        while cycle < a.cycles and all(j.alive() for j in jobs.values()):
            for ph in phases:
                for k in ph:
                    jobs[k].go()
                t0 = time.monotonic()
                time.sleep(a.window)
                t1 = time.monotonic()
                for k in ph:
                    jobs[k].stop()
                windows.append((cycle, ph, t0, t1, all(j.alive() for j in jobs.values())))
            cycle += 1
        for j in jobs.values():  # the rest of the runs together (not measured; the reports come at their ends)
            j.go()
        out = {k: j.report() for k, j in jobs.items()}
    finally:
        # A failed or interrupted measurement leaves no job behind, stopped or running.
        for j in jobs.values():
            j.end()
    # Whole cycles: every job alive through them, and every job decoding when they began (a job
    # still loading or prefilling after its warm-up has no pace yet).
    decoding = max(j["token_clock_ms"][0] / 1000 for j in out.values())
    full = sorted({w[0] for w in windows
                   if all(x[4] and x[2] >= decoding for x in windows if x[0] == w[0])})
    if len(full) < a.reps:
        raise SystemExit(f"{tag}: {len(full)} whole cycles of {a.cycles} (a job ended early: --window, --cycles)")
    margin = min(0.1, a.window / 4)

    def pace(k, ph, cycles):
        # (ms a token in the phase's windows of these cycles, the median index of those tokens)
        return in_windows(out[k], [(w[2], w[3]) for w in windows if w[1] == ph and w[0] in cycles], margin)

    # Each round's prefill: --prefill-runs whole runs of the row, each between two one-rank runs
    # (pinned to the CPUs in turn), each alone; the round takes the median row and the median of
    # the one-rank runs around them. One run a round read a row's prefill at twice its neighbours'
    # now and then (session 32: the Llama's 3 ranks over shm 252 / 129 / 136 tok/s, one vCPU slow
    # for a start's length), and two such rounds of three made the row's median. Tensor parallel
    # beside each row's run: a co-run pair of one-rank runs, whose slower prefill against the
    # one-rank runs on either side is the round's compute_scaling (the median of its runs). The
    # model's one figure from before its rows read both cores at 0.95 of alone in some pairs and
    # 0.57 in others minutes apart (session 33), and its rows took whichever the table began with.
    def whole_run(k, cpu):
        cmd = run_cmd(lattice, target, prompt, n, mode, prov, a, 2) if k == "row" else \
            run_cmd(lattice, target, prompt, 1, "-", "-", a, 2)
        return json.loads(sh(pinned(cmd, cpu)))

    def one_prefill(cpu):  # (prefill tok/s, its forward step's ms)
        j = whole_run("one", cpu)
        return j["prefill_tok_s"], j["ranks"][0].get("prefill_step_ms", 0)

    ones = [one_prefill(cpus[0])]
    pre_ones, pre_rows, pre_scaling = [], [], []
    for r in range(a.reps):
        rows_r, scaling_r = [], []
        for i in range(a.prefill_runs):
            rows_r.append(whole_run("row", None)["prefill_tok_s"])
            co = co_run_pair(lattice, target, prompt, machine, a, n_predict=2) if corun else None
            ones.append(one_prefill(cpus[len(ones) % len(cpus)]))
            if co and co[1] > 0:
                scaling_r.append((ones[-2][1] + ones[-1][1]) / 2 / co[1])
        pre_rows.append(statistics.median(rows_r))
        pre_ones.append(statistics.median(x[0] for x in ones[-(a.prefill_runs + 1):]))
        pre_scaling.append(statistics.median(scaling_r) if scaling_r else None)

    rounds, saved = [], []
    per = len(full) // a.reps
    ratio = m1[2]["ranks"][0]["step_ms_per_token"] / m1[2]["ranks"][0]["decode_ms_per_token"]
    for r in range(a.reps):
        cyc = set(full[r * per:(r + 1) * per] if r + 1 < a.reps else full[r * per:])
        row_ms, row_at = pace("row", ("row",), cyc)
        alone = [pace(f"cpu{i}", (f"cpu{i}",), cyc) for i in range(len(cpus))]
        one_ms = sum(x[0] for x in alone) / len(alone)
        if row_ms <= 0 or min(x[0] for x in alone) <= 0:
            raise SystemExit(f"{tag}: round {r}: no token wholly inside a phase (--window too short)")
        # The rates are at the tokens' positions in the phases: the row predicted at its own, the
        # one-rank fit at the one-rank runs' (sim --calibrate-from takes n_prompt + n_gen / 2).
        run = dict(out["row"], decode_tok_s=1000 / row_ms, decode_ms=None,
                   interleaved={"cycles": sorted(cyc), "ms_per_token": row_ms, "at_token": row_at,
                                "one_rank_ms": [x[0] for x in alone]})
        pre = pre_rows[r]
        j = dict(out["cpu0"], decode_tok_s=1000 / one_ms, n_gen=2 * max(1, int(median([x[1] for x in alone]))),
                 prefill_tok_s=pre_ones[r])
        j["ranks"] = [dict(j["ranks"][0], decode_ms_per_token=one_ms, step_ms_per_token=one_ms * ratio)]
        figures = {}
        if corun:
            co = max(pace("cpu0", ("cpu0", "cpu1"), cyc)[0], pace("cpu1", ("cpu0", "cpu1"), cyc)[0])
            figures = {"kernel_scaling": one_ms / co if co > 0 else 0}
            if pre_scaling[r]:
                figures["compute_scaling"] = pre_scaling[r]
        one_rank, m = round_files(lattice, work, target, machine, tag, r, j, figures,
                                  "the slower of the two one-rank runs on both cores at once against them alone, "
                                  "in turns with the row's run (--interleave); prefill (compute_scaling): the "
                                  "median over the round's whole runs of a co-run pair's slower prefill against "
                                  "the one-rank runs on either side")
        rounds.append(((1000 / row_ms, pre, run), one_rank, m))
        saved.append({"decode_tok_s": 1000 / row_ms, "prefill_tok_s": pre, "run": run, "one_rank": one_rank, "machine": m,
                      "windows": [w for w in windows if w[0] in cyc], "others": {k: out[k] for k in out if k != "row"}})
    with open(manifest, "w") as f:
        json.dump(saved, f)
    keep_rounds(manifest, a)
    return rounds


def predict(lattice, work, target, machine, one_rank, n, mode, prov, a, n_prompt, at=None):
    """`lattice sim` for a row: (decode tok/s at the run's middle position, prefill tok/s, the
    decode prediction's JSON)."""
    topo = topology(work, n, prov, machine, a)
    base = [lattice, "sim", "-m", target, "--hostfile", topo, "--parallel", mode, "-t", "1",
            "--calibrate-from", one_rank, "--json"]
    s = json.loads(sh(base + ["--prompt", str(n_prompt + (a.n // 2 if at is None else at))]))
    sp = json.loads(sh(base + ["--prompt", str(n_prompt)]))
    return s["decode_tok_s"], sp["prefill_tok_s"], s


def one(lattice, work, target, label, machine, prompt, n, mode, prov, a, one_rank, measured=None, m1=None):
    """Measures (unless given) and predicts one configuration; a row of the table. With --adjacent,
    each round's run against its own prediction, and the row is the round of the median decode
    error (its prefill error the median of the rounds')."""
    # In turns while every rank is pinned (--bind cores beyond the cores): unpinned, the scheduler
    # places the ranks anew at every resume, and a stopped and resumed row no longer runs as a
    # whole run does (docs/SIM.md, session 26: 3 tensor-parallel ranks at 1.07x the pace of 2 in
    # turns, 1.27-1.35x in whole runs), so those rows are --adjacent's. Tensor parallel only: a
    # pipeline's phase keeps both cores busy (the waiting stages poll), and with no co-run phase
    # to carry that, its one-rank phases read 20-25 ms a token where whole runs read 28-29
    # (session 27: the 4-stage pipelines +31 to +42% in turns, 0.96 of one rank in whole runs).
    cores = json.load(open(machine)).get("cores", 0) or len(usable_cpus())
    if measured is None and a.interleave and mode == "tp" and 1 < n and (n <= cores or a.bind == "cores"):
        rounds = interleaved(lattice, work, target, label, machine, prompt, n, mode, prov, a, m1)
    elif measured is None and a.adjacent and n > 1:
        rounds = adjacent(lattice, work, target, label, machine, prompt, n, mode, prov, a)
    else:
        rounds = [(measured or measure(lattice, target, prompt, n, mode, prov, a), one_rank, machine)]
    rows = []
    for (tg, pp, j), one_rank_i, machine_i in rounds:
        at = j.get("interleaved", {}).get("at_token")
        dec, pre, s = predict(lattice, work, target, machine_i, one_rank_i, n, mode, prov, a, j["n_prompt"], at)
        mf = json.load(open(machine_i))
        rows.append({"model": label, "ranks": n, "mode": mode if n > 1 else "-", "provider": prov if n > 1 else "-",
                     "measured_tok_s": tg, "predicted_tok_s": dec, "error": dec / tg - 1,
                     "measured_prefill_tok_s": pp, "predicted_prefill_tok_s": pre, "prefill_error": pre / pp - 1 if pp > 0 else None,
                     "decode_efficiency": s.get("fitted_decode_efficiency"),
                     "prefill_efficiency": s.get("fitted_prefill_efficiency"),
                     "bound": None if n == 1 else 0.10 if n <= 2 else 0.20,
                     "one_rank_tok_s": json.load(open(one_rank_i))["decode_tok_s"],
                     "kernel_scaling": mf.get("kernel_scaling"), "compute_scaling": mf.get("compute_scaling")})
    row = dict(median_round(rows, "error", "measured_tok_s", "predicted_tok_s"))
    # A round whose prefill was not measured (none reported) is left out: the median of the rounds that are.
    measured_pre = [r for r in rows if r["prefill_error"] is not None]
    if measured_pre:
        pre = median_round(measured_pre, "prefill_error", "measured_prefill_tok_s", "predicted_prefill_tok_s")
        row = dict(row, measured_prefill_tok_s=pre["measured_prefill_tok_s"],
                   predicted_prefill_tok_s=pre["predicted_prefill_tok_s"], prefill_error=pre["prefill_error"])
    if len(rows) > 1:
        row["round_errors"] = [r["error"] for r in rows]
        row["round_prefill_errors"] = [r["prefill_error"] for r in measured_pre]
    return row


def median_round(rows, key, measured, predicted):
    """The round of the median `key` (an error); of an even count (rounds pooled from tables of
    odd counts each, --pool), the two middle rounds' mean: their error's and their figures' (the
    upper of the two would lean every pooled row to its larger error)."""
    rs = sorted(rows, key=lambda r: r[key])
    if len(rs) % 2:
        return rs[len(rs) // 2]
    lo, hi = rs[len(rs) // 2 - 1], rs[len(rs) // 2]
    return dict(hi, **{k: (lo[k] + hi[k]) / 2 for k in (key, measured, predicted)})


def outside(r, key):
    """Whether a row's error (`key`: "error" or "prefill_error") is beyond its bound; a failed row
    is, a one-rank row (no bound) never."""
    return r["bound"] is not None and ("failed" in r or abs(r[key]) > r["bound"])


def within(rows):
    """How many rows of more than one rank are within their bound: (decode, rows, prefill, rows
    whose prefill was measured)."""
    judged = [r for r in rows if r["bound"] is not None]
    pre_rows = [r for r in judged if "failed" in r or r.get("prefill_error") is not None]
    return (sum(not outside(r, "error") for r in judged), len(judged),
            sum(not outside(r, "prefill_error") for r in pre_rows), len(pre_rows))


def mark(r, key):
    """An error of the table, with a cross when it is outside the row's bound."""
    return f"{100 * r[key]:+.1f}%" + (" ✗" if outside(r, key) else "")


def one_rank_cmd(lattice, target, prompt, a):
    return [lattice, "run", "-m", target, "-p", prompt, "-n", str(a.n), "-t", "1", "--ignore-eos", "--temp", "0",
            "--json", "--nodes", "1", "--provider", "shm"]


def co_run_pair(lattice, target, prompt, machine, a, n_predict=None):
    """Two one-rank runs started together (as many as the machine's cores, at most 2), of
    `n_predict` tokens (None: --n): (the slower copy's forward step, ms a token; the slower copy's
    prefill, ms); None on a machine of one core."""
    m = json.load(open(machine))
    if m.get("cores", 0) < 2:
        return None
    # Each copy on a CPU of its own, as two ranks are pinned (unpinned when not --pin-alone).
    cpus = pin_cpus(2, a)
    cmd = one_rank_cmd(lattice, target, prompt, a) if n_predict is None else \
        run_cmd(lattice, target, prompt, 1, "-", "-", a, n_predict)
    procs = [subprocess.Popen(pinned(cmd, cpus[k]), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for k in range(2)]
    steps, prefills = [], []
    for p in procs:
        out, err = p.communicate(timeout=900)
        if p.returncode != 0:
            sys.exit(f"co-run of two one-rank runs failed ({p.returncode}):\n{err[-2000:]}")
        r = json.loads(out)["ranks"][0]
        steps.append(r["step_ms_per_token"])
        prefills.append(r.get("prefill_step_ms", 0))
    return max(steps), max(prefills)


def with_scaling(work, machine, figures, how, name):
    """A copy of the machine file with each of `figures` ({"kernel_scaling": f, ...}) set within
    (0.05, 1] (a figure that is not positive, as from a run that did not report it, is left out),
    and said in its source: (the copy, the figures set)."""
    m = json.load(open(machine))
    figures = {k: max(0.05, min(1.0, f)) for k, f in figures.items() if f > 0}
    if not figures:
        return machine, figures
    m.update(figures)
    # A machine copy made by an earlier co-run (a row's, from the table's) says so once, not twice.
    kept = [c for c in m.get("source", "").split("; ") if not c.startswith(("kernel_scaling", "compute_scaling"))]
    m["source"] = "; ".join(kept + [" ".join(f"{k} {f:.3f}" for k, f in figures.items()) + f": {how}"])
    out = os.path.join(work, name)
    with open(out, "w") as f:
        json.dump(m, f, indent=2)
    return out, figures


def co_run_scaling(lattice, work, target, prompt, machine, alone, a, name="this-machine-corun.json"):
    """How this model's own decode step and prefill scale when both cores run them at once: two
    one-rank runs started together, the slower copy's forward step time a token (and its prefill)
    against the mean of the runs alone just before and just after them; the median of max(3,
    --reps) such pairs. The slower, not the mean: tensor-parallel ranks meet at every all-reduce,
    so they step at the pace of the slower core, and the two copies differ by 2-9% on this VM
    (docs/SIM.md, session 16). Each pair against the runs beside it, and the median, since the
    host's speed moves within seconds (session 17: one pair of three read 0.61 where its
    neighbours read 0.93). The calibration's kernel_scaling comes from one large matmul; the
    model's matrices (k and v a few hundred rows a rank, an expert's 512) scale worse (session
    10). Written into a copy of the machine file; returns (machine file, the figures set or None)."""
    m = json.load(open(machine))
    if m.get("cores", 0) < 2 or not alone.get("ranks") or alone["ranks"][0].get("step_ms_per_token", 0) <= 0:
        return machine, None

    def alone_run():
        r = json.loads(sh(one_rank_cmd(lattice, target, prompt, a)))["ranks"][0]
        return r["step_ms_per_token"], r.get("prefill_step_ms", 0)

    decode, prefill = [], []
    before = alone_run()
    for _ in range(max(3, a.reps)):
        slower = co_run_pair(lattice, target, prompt, machine, a)
        # Against the runs alone on either side of the pair (the one after serves the next pair
        # too): a host whose speed drifts within seconds moved a ratio against the run before
        # alone by up to 14% (sessions 17-19: 0.72-1.00 on the same model and host).
        after = alone_run()
        decode.append((before[0] + after[0]) / 2 / slower[0])
        prefill.append((before[1] + after[1]) / 2 / slower[1] if slower[1] > 0 else 0)
        before = after
    return with_scaling(work, machine, {"kernel_scaling": sorted(decode)[len(decode) // 2],
                                        "compute_scaling": sorted(prefill)[len(prefill) // 2]},
                        f"the median over {len(decode)} pairs of the slower of two copies of this model's "
                        "decode (kernel_scaling) and prefill (compute_scaling) on both cores at once, against the "
                        "runs alone on either side", name)


def raise_machine(lattice, work, target, machine, tok_s, name="this-machine-raised.json"):
    """A machine file measured while other work loaded the machine can read slower than the run
    just did; then no efficiency fits. What the one-rank run read (tok/s x the model's bytes a token)
    is a lower bound of one thread's and of the memory's streaming rate: a copy of the machine file
    raised to it serves this model (said in the table's header), nothing else changes. Returns
    (machine file, the raised figure or None)."""
    one = os.path.join(work, "local-1-probe.json")
    with open(one, "w") as f:
        json.dump({"version": 1, "hosts": [{"name": "r0", "address": "127.0.0.1:7100", "machine": machine}]}, f)
    s = json.loads(sh([lattice, "sim", "-m", target, "--hostfile", one, "-t", "1", "--json"]))
    # The weights' bytes only; the run also read its KV cache and activations (a few percent at
    # the table's 30 + N positions): 5% of room, so the fit is left to reproduce the run.
    read = 1.05 * tok_s * s["weight_bytes_per_token"] / 1e9
    m = json.load(open(machine))
    if read <= min(m["core_bw_gbs"], m["mem_bw_gbs"]):
        return machine, None
    m["core_bw_gbs"] = max(m["core_bw_gbs"], read)
    m["mem_bw_gbs"] = max(m["mem_bw_gbs"], read)
    m["source"] = m.get("source", "") + f"; read rates raised to the {read:.1f} GB/s a one-rank run read"
    raised = os.path.join(work, name)
    with open(raised, "w") as f:
        json.dump(m, f, indent=2)
    return raised, read


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", default="1,2,3,4")
    ap.add_argument("--modes", default="tp,pp")
    ap.add_argument("--providers", default="shm,tcp")
    ap.add_argument("--shape", default="1.1b", choices=["1.1b", "small", "moe"])
    ap.add_argument("--model", help="a GGUF to run and predict instead of a generated --shape")
    ap.add_argument("--machine", help="calibration file to reuse (written if missing)")
    ap.add_argument("--link-latency-us", type=float, default=50.0, help="emulated links: one-way latency")
    ap.add_argument("--link-gbytes-s", type=float, default=1.0, help="emulated links: GB/s each way")
    ap.add_argument("--n", type=int, default=64, help="tokens generated per run")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="quick calibration")
    ap.add_argument("--adjacent", action="store_true",
                    help="each row calibrated on a one-rank run (and co-run) measured beside it, not once at the start")
    ap.add_argument("--pin-alone", action="store_true",
                    help="with --adjacent: each one-rank run pinned to the CPU a rank of the row starts on, in "
                         "turn, and the co-run's copies to the CPUs of two ranks (taskset)")
    ap.add_argument("--repredict", action="store_true",
                    help="with --adjacent: no runs; predict the last table's saved runs and calibrations again "
                         "(a model change against the same measurements)")
    ap.add_argument("--interleave", action="store_true",
                    help="each tensor-parallel row's run in turns with its one-rank runs and co-run, phase by phase "
                         "(SIGTSTP / SIGCONT of their launchers), each round predicted from the phases beside it; "
                         "pipelines as --adjacent's whole runs")
    ap.add_argument("--prefill-runs", type=int, default=3,
                    help="with --interleave: the row's whole runs a round for its prefill (the median)")
    ap.add_argument("--window", type=float, default=0.6, help="with --interleave: seconds a phase")
    ap.add_argument("--cycles", type=int, default=12, help="with --interleave: cycles of phases a row")
    ap.add_argument("--warmup", type=float, default=5.0,
                    help="with --interleave: seconds each job runs alone first (loading, its prefill)")
    ap.add_argument("--bind", default="cores", choices=["cores", "auto"],
                    help="the rows' `run --bind`: cores pins ranks beyond the cores too (rank r on CPU r mod CPUs, "
                         "as the simulator places them), auto leaves them to the scheduler")
    ap.add_argument("--keep", metavar="DIR",
                    help="with --adjacent: copy each measured row's rounds (runs and calibrations) into DIR, "
                         "one folder a table, for --pool")
    ap.add_argument("--pool", metavar="DIR[,DIR]",
                    help="with --repredict: each row's rounds from these kept tables too (--keep), every round "
                         "predicted from its own calibration, the row the median of them all")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.pool and not a.repredict:
        ap.error("--pool needs --repredict (it predicts kept rounds again; it measures nothing)")
    if a.keep and a.repredict:
        ap.error("--keep keeps measured rounds; --repredict measures none")
    # Absolute: the rounds' files are named in topology files written elsewhere.
    a.pool = [os.path.abspath(d) for d in (a.pool or "").split(",") if d]
    for d in a.pool:
        if not os.path.isdir(d):
            ap.error(f"--pool: {d} is not a folder (one a table, written by --keep)")
    a.keep = a.keep and os.path.abspath(a.keep)
    if a.interleave:
        a.adjacent = True  # rounds beside each run, as --adjacent's (and its table columns)
        if a.window <= 0.1 or a.cycles < a.reps or a.warmup <= 0 or a.prefill_runs < 1:
            ap.error("--interleave needs --window above 0.1 s, --cycles of at least --reps, a positive --warmup "
                     "and --prefill-runs of at least 1")
    if a.repredict and not (a.adjacent and a.machine and os.path.exists(a.machine)):
        ap.error("--repredict needs --adjacent and the table's --machine file")
    lattice = os.path.abspath(os.path.join(a.build, "lattice"))
    work = os.path.abspath(os.path.join(a.build, "sim-validation"))
    os.makedirs(work, exist_ok=True)
    target = os.path.abspath(a.model) if a.model else model(lattice, work, a.shape)
    label = os.path.basename(a.model) if a.model else a.shape
    machine = os.path.abspath(a.machine) if a.machine else os.path.join(work, "this-machine.json")
    if not (a.machine and os.path.exists(machine)):
        # The machine alone (bandwidth, matmul, links); the engine's efficiencies come from the
        # predicted model's own one-rank run below.
        # What it printed is kept beside the file (this-machine.log): a table's calibration as
        # measured, to read when its rows are predicted again (--repredict) or compared.
        said = sh([lattice, "sim", "--calibrate", "-o", machine] + (["--quick"] if a.quick else []))
        with open(os.path.splitext(machine)[0] + ".log", "w") as f:
            f.write(said)
        if not a.json:
            print(said, end="")
    rows = []
    prompt = "The quick brown fox jumps over the lazy dog and keeps running far away"
    # The calibration point: this model on one rank (the median of --reps, and of at least 3:
    # every other row inherits it, and a lone cold run read 9.4 tok/s where two pipeline stages of
    # the same file read 35), the same `run` as every other row; its row of the table is this.
    saved_m1 = os.path.join(work, f"one-rank-row-{label}.json")
    if a.repredict:
        m1 = tuple(json.load(open(saved_m1)))
    else:
        m1 = measure(lattice, target, prompt, 1, "-", "-", a, reps=max(3, a.reps))
        with open(saved_m1, "w") as f:
            json.dump(m1, f)
    one_rank = os.path.join(work, f"one-rank-{label}.json")
    with open(one_rank, "w") as f:
        json.dump(dict(m1[2], prefill_tok_s=m1[1]), f)
    machine, raised = raise_machine(lattice, work, target, machine, m1[0])
    scaling = None
    # The model's co-run figures, for rows that do not measure their own: with --adjacent (and
    # --interleave) every tensor-parallel row sets both beside each round, so a table of tensor
    # parallel alone has no row to take them.
    own_figures = a.adjacent and set(a.modes.split(",")) == {"tp"}
    if "tp" in a.modes.split(",") and any(int(x) > 1 for x in a.ranks.split(",")) and not a.repredict \
            and not own_figures:
        machine, scaling = co_run_scaling(lattice, work, target, prompt, machine, m1[2], a)
    for n in [int(x) for x in a.ranks.split(",")]:
        for mode in a.modes.split(","):
            for prov in a.providers.split(","):
                if n == 1 and (mode != a.modes.split(",")[0] or prov != a.providers.split(",")[0]):
                    continue
                try:
                    row = one(lattice, work, target, label, machine, prompt, n, mode, prov, a, one_rank,
                              m1 if n == 1 else None, m1)
                except (SystemExit, subprocess.TimeoutExpired, KeyError, ValueError) as e:
                    row = {"model": label, "ranks": n, "mode": mode, "provider": prov, "failed": str(e)[-400:],
                           "bound": None if n == 1 else 0.10 if n <= 2 else 0.20}
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
    if a.json:
        dec, n_dec, pre, n_pre = within(rows)
        print(json.dumps({"shape": label, "machine": json.load(open(machine)), "machine_raised_to_gbs": raised,
                          "model_kernel_scaling": scaling, "rows": rows,
                          "within": {"decode": dec, "decode_rows": n_dec, "prefill": pre, "prefill_rows": n_pre}},
                         indent=2))
        return
    eff = next((r for r in rows if "decode_efficiency" in r), {})
    print(f"model {label}; machine file {machine}; emulated links {a.link_latency_us:g} us, {a.link_gbytes_s:g} GB/s; "
          f"calibrated on one rank ({one_rank}): decode efficiency {eff.get('decode_efficiency') or 0:.3f}, "
          f"prefill {eff.get('prefill_efficiency') or 0:.3f} of compute")
    if scaling:
        print(f"this model on both cores at once: decode step {scaling['kernel_scaling']:.3f} of alone (kernel_scaling "
              "of the machine copy)" + (f", prefill {scaling['compute_scaling']:.3f} (compute_scaling)"
                                        if "compute_scaling" in scaling else ""))
    lockstep = json.load(open(machine)).get("lockstep_scaling") or {}
    if lockstep:
        print("ranks in lockstep (sim --calibrate, bench coll --work): " +
              ", ".join(f"{k} ranks {v:.3f}" for k, v in sorted(lockstep.items())))
    if raised:
        print(f"(the machine file read slower than the one-rank run: its read rates raised to the {raised:.1f} GB/s "
              "that run read; a loaded machine)")
    if a.adjacent:
        print("each row calibrated beside each of its runs (--adjacent): the row is the round of the median error; its "
              "one-rank decode tok/s, co-run scaling (decode / prefill) and every round's decode and prefill error in the last "
              "columns")
    print("| model | ranks | parallel | provider | decode measured | predicted | error | bound | prefill measured | predicted | error |"
          + (" one rank | co-run | rounds | prefill rounds |" if a.adjacent else ""))
    print("| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
          + (" ---: | ---: | --- | --- |" if a.adjacent else ""))
    for r in rows:
        if "failed" in r:
            print(f"| {r['model']} | {r['ranks']} | {r['mode']} | {r['provider']} | failed: {r['failed'].splitlines()[-1]} |")
            continue
        bound = "calibration point" if r["bound"] is None else f"±{100 * r['bound']:.0f}%"
        print(f"| {r['model']} | {r['ranks']} | {r['mode']} | {r['provider']} | {r['measured_tok_s']:.1f} | "
              f"{r['predicted_tok_s']:.1f} | {mark(r, 'error')} | {bound} | "
              + (f"{r['measured_prefill_tok_s']:.1f} | {r['predicted_prefill_tok_s']:.1f} | {mark(r, 'prefill_error')} |"
                 if r["prefill_error"] is not None else "not measured | | |")
              + (f" {r['one_rank_tok_s']:.1f} | {r['kernel_scaling'] or 1:.3f} / {r.get('compute_scaling') or 1:.3f} | "
                 + " ".join(f"{100 * e:+.0f}" for e in r.get("round_errors", [])) + " | "
                 + " ".join(f"{100 * e:+.0f}" for e in r.get("round_prefill_errors", [])) + " |" if a.adjacent else ""))
    dec, n_dec, pre, n_pre = within(rows)
    if n_dec:
        print(f"within the bounds (rows of 2 or more ranks; ✗ marks the others): decode {dec} of {n_dec}, "
              f"prefill {pre} of {n_pre}")


if __name__ == "__main__":
    main()
