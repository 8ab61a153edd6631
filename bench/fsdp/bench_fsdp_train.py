#!/usr/bin/env python3
"""bench/fsdp: the FSDP training benchmark (issue 10, item 12).

Trains examples/train_gpt at one configuration (default: GPT L4 D256 H4 T128, batch 8 per rank,
AdamW, 1 BLAS thread per rank) in one run, as
  ours:    unsharded (--sharding none), FSDP world 1, FSDP 2 ranks on threads (float32 and
           --mixed-precision bf16), on MPI and on Gloo (mpirun -np 2 --oversubscribe --bind-to
           none);
  ceiling: 2 unsharded jobs at once, the most 2 independent ranks could get from the host;
  PyTorch: unsharded, FSDP1 and FSDP2 over gloo (tools/torch_reference/torch_fsdp_gpt.py), when a
           torch >= 2 is importable by --torch-python (default /opt/torch2/bin/python, then
           python3);
and prints per run ms/step and tokens/s (the median over the steps after --warmup), the CPU time
per step (all ranks and threads: what the step costs whatever else runs on the host), exposed
communication (train_gpt's time blocked on collectives), per-rank peak memory (our allocator's
bytes; and every run's maximum resident set), the first and last loss, then the ratios against
the targets. Each configuration runs --rounds times (default 3), the rounds interleaved, and the
round with the lowest median counts: other jobs on a shared host only ever add time. Every run
starts from the same weights (train_gpt --steps 0 --save) and data, so the losses of runs with
the same global batch agree: the table says by how much.

    bench/fsdp/bench_fsdp_train.py [--build build] [--steps 12] [--warmup 2] [--rounds 3]
    bench/fsdp/bench_fsdp_train.py --show build/bench-results/fsdp_train.json

Writes build/bench-results/fsdp_train.json (--json). Our runs get OPENBLAS_CORETYPE when
OpenBLAS falls back to its Prescott kernels on a CPU that has better ones
(--openblas-coretype; bench/fsdp/README.md says why). Python's standard library only.

One file over 600 lines: one table of runs, their driver and report.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCH_SCRIPT = os.path.join(ROOT, "tools", "torch_reference", "torch_fsdp_gpt.py")
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
TORCH_UNAVAILABLE = 3  # torch_fsdp_gpt.py's exit status for a mode this torch lacks

TARGETS = {"world1_overhead": 1.05, "scaling": 1.8, "exposed_comm_pct": 10.0,
           # issue 14: bf16 step <= 1.1x float32's, half the bytes communicated, a smaller peak
           "bf16_step": 1.1, "bf16_bytes": 0.5, "bf16_peak": 1.0,
           # issue 14: train_gpt at 2 ranks >= 2x PyTorch FSDP2's tokens/s
           "vs_fsdp2": 2.0}


class Run:
    """One line of the table: what ran, and its measurement in each round. The table shows the
    round with the lowest median step time (other jobs on the host only ever add time)."""

    def __init__(self, name, kind, world, command=(), env=None, batch_world=None):
        self.name, self.kind, self.world = name, kind, world
        self.batch_world = batch_world or world  # the global batch is batch x batch_world
        self.command, self.env = list(command), dict(env or {})
        self.status = "not run"  # "ok" | "failed: ..." | "unavailable: ..." | "skipped: ..."
        self.rounds = []  # one dict per successful round (see measure_ours / measure_torch)
        self.failures = []  # PyTorch rounds that failed (retried in the next round)

    def ok(self):
        return self.status == "ok" and bool(self.rounds)

    def best(self):
        return min(self.rounds, key=lambda m: m["ms_per_step"]) if self.rounds else {}

    def get(self, key):
        return self.best().get(key)

    def to_json(self):
        return {"name": self.name, "kind": self.kind, "world": self.world,
                "batch_world": self.batch_world,
                "command": self.command, "env": self.env, "status": self.status,
                "best": self.best(), "rounds": self.rounds, "failures": self.failures}


def tokens_per_step(a, world):
    return a.batch * world * a.seq


def tree_cpu_seconds(root):
    """User + system CPU seconds of the live process `root` and all its descendants (all their
    threads), from /proc."""
    parent, cpu = {}, {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        parent[pid] = int(fields[1])
        cpu[pid] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    total = 0.0
    for pid, seconds in cpu.items():
        p = pid
        while p > 1 and p != root:
            p = parent.get(p, 0)
        if p == root:
            total += seconds
    return total


def run_process(cmd, env_extra, timeout, on_line=None):
    """Runs cmd, calling on_line(line, pid) for each line of its stdout as it comes; returns
    (rc, stdout, stderr, seconds, max RSS in MiB, CPU seconds of the whole run)."""
    env = dict(os.environ, **env_extra)
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env, cwd=ROOT,
                                text=True, errors="replace")
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if on_line is not None:
                on_line(line.rstrip("\n"), proc.pid)
        _, status, usage = os.wait4(proc.pid, 0)
        timed_out = not timer.is_alive()
        timer.cancel()
        proc.returncode = 124 if timed_out else os.waitstatus_to_exitcode(status)
        err.seek(0)
        # ru_maxrss of wait4: the largest of the process and its waited-for descendants (KiB).
        return (proc.returncode, "".join(lines), err.read().decode(errors="replace"),
                time.monotonic() - t0, usage.ru_maxrss / 1024.0,
                usage.ru_utime + usage.ru_stime)


def tail(text, n=6):
    return " | ".join(text.strip().splitlines()[-n:])


STEP_RE = re.compile(r"^step (\d+) loss (\S+) tokens/s (\S+)$", re.M)
SUMMARY_RE = re.compile(r"tokens/s (\S+)\s+ms/step (\S+)\s+exposed communication (\S+)%")
PEAK_RE = re.compile(r"^rank (\d+) peak memory (\S+) MiB(?:;.*)?$", re.M)
COMM_RE = re.compile(r"communicated per step: all-gather (\S+) MiB, reduce (\S+) MiB")


def parse_train_gpt(out, a, world):
    """A measurement from train_gpt's output: one `step i loss x tokens/s y` line per step
    (rank 0), the summary line and `rank r peak memory m MiB` per rank."""
    steps = STEP_RE.findall(out)
    if len(steps) != a.steps:
        raise ValueError("expected %d step lines, found %d" % (a.steps, len(steps)))
    tps = tokens_per_step(a, world)
    m = {"losses": [float(loss) for _, loss, _ in steps],
         "step_ms": [1000.0 * tps / float(rate) for _, _, rate in steps]}
    summary = SUMMARY_RE.search(out)
    if summary is None:
        raise ValueError("no 'tokens/s .. ms/step .. exposed communication' line")
    m["exposed_comm_pct"] = float(summary.group(3))
    peaks = sorted((int(r), float(mib)) for r, mib in PEAK_RE.findall(out))
    if [r for r, _ in peaks] != list(range(world)):
        raise ValueError("expected a peak memory line per rank, found ranks %s"
                         % [r for r, _ in peaks])
    m["peak_mib"] = [mib for _, mib in peaks]
    comm = COMM_RE.search(out)
    if comm:
        m["all_gather_mib"], m["reduce_mib"] = float(comm.group(1)), float(comm.group(2))
    m["ms_per_step"] = statistics.median(m["step_ms"][a.warmup:])
    m["tokens_per_s"] = 1000.0 * tps / m["ms_per_step"]
    return m


def model_flags(a):
    return ["--layers", str(a.layers), "--d-model", str(a.d_model), "--heads", str(a.heads),
            "--seq", str(a.seq)]


def openblas_library(exe):
    """The OpenBLAS library that exe loads (ldd), or None."""
    p = subprocess.run(["ldd", exe], capture_output=True, text=True)
    m = re.search(r"=> (\S*openblas\S*)", p.stdout)
    return m.group(1) if m else None


def openblas_core(library, coretype=None):
    """The kernel set OpenBLAS picks in a fresh process (openblas_get_corename), with
    OPENBLAS_CORETYPE=coretype or, for None, unset."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    code = ("import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); "
            "lib.openblas_get_corename.restype = ctypes.c_char_p; "
            "print(lib.openblas_get_corename().decode())")
    p = subprocess.run([sys.executable, "-c", code, library], capture_output=True, text=True,
                       env=env)
    return p.stdout.strip() if p.returncode == 0 else None


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def openblas_setting(choice, train_gpt):
    """OPENBLAS_CORETYPE for our runs: (env, description). OpenBLAS 0.3.21 does not recognise
    some virtual CPUs (model name "Intel(R) Xeon(R) Processor") and falls back to its Prescott
    (SSE3) kernels, 3x slower here than the AVX-512 ones; "auto" then names the kernels that the
    CPU flags allow, "none" keeps OpenBLAS's choice, any other value is passed as it is."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return {}, "OPENBLAS_CORETYPE=%s (from the environment)" % os.environ["OPENBLAS_CORETYPE"]
    library = openblas_library(train_gpt)
    detected = openblas_core(library) if library else None
    if choice == "none" or library is None:
        return {}, "OpenBLAS kernels: %s (its own choice)" % detected
    if choice == "auto":
        flags = cpu_flags()
        if detected is None or detected.lower() not in ("prescott", "core2", "nehalem"):
            return {}, "OpenBLAS kernels: %s (its own choice)" % detected
        if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
            choice = "SkylakeX"
        elif {"avx2", "fma"} <= flags:
            choice = "Haswell"
        else:
            return {}, "OpenBLAS kernels: %s (its own choice)" % detected
    used = openblas_core(library, choice)
    return ({"OPENBLAS_CORETYPE": choice},
            "OpenBLAS kernels: %s (OPENBLAS_CORETYPE=%s; on its own OpenBLAS picks %s)"
            % (used, choice, detected))


BF16_RUN = "ours threads bf16"


def ours(a, train_gpt, init, store_dir, blas_env):
    """Our five runs."""
    common = [train_gpt] + model_flags(a) + [
        "--batch", str(a.batch), "--steps", str(a.steps), "--optimizer", "adamw",
        "--lr", str(a.lr), "--data", a.data, "--load", init, "--log-every", "1",
        "--threads-per-rank", "1"]
    mpirun = ["mpirun", "-np", str(a.ranks), "--oversubscribe", "--bind-to", "none"]
    unsharded = common + ["--sharding", "none", "--ranks", "1"]
    runs = [Run("ours unsharded", "ours", 1, unsharded, blas_env),
            Run("ours FSDP threads", "ours", 1, common + ["--ranks", "1"], blas_env),
            # The host's ceiling for W ranks: W independent unsharded jobs at once.
            Run("unsharded x%d" % a.ranks, "concurrent", a.ranks, unsharded, blas_env, 1),
            Run("ours FSDP threads", "ours", a.ranks, common + ["--ranks", str(a.ranks)],
                blas_env),
            Run(BF16_RUN, "ours", a.ranks,
                common + ["--ranks", str(a.ranks), "--mixed-precision", "bf16"], blas_env)]
    for backend in ("mpi", "gloo"):
        env = dict(MPI_ENV, **blas_env)
        if backend == "gloo":  # the file store's rendezvous directory, fresh for this run
            env["FSDP_STORE_PATH"] = os.path.join(store_dir, "gloo")
        r = Run("ours FSDP " + backend, "ours", a.ranks,
                mpirun + common + ["--backend", backend], env)
        if shutil.which("mpirun") is None:
            r.status = "skipped: no mpirun"
        runs.append(r)
    return runs


def measure_ours(run, a, world=None):
    """One round of one of our runs (of `world` ranks; default run.world); the CPU time of steps
    warmup..steps-1 is read from /proc when rank 0 prints the step lines that bound them."""
    marks = {}

    def on_line(line, pid):
        m = STEP_RE.match(line)
        if m and int(m.group(1)) in (a.warmup - 1, a.steps - 1):
            marks[int(m.group(1))] = tree_cpu_seconds(pid)

    if "FSDP_STORE_PATH" in run.env:  # a gloo file store must start empty
        shutil.rmtree(run.env["FSDP_STORE_PATH"], ignore_errors=True)
        os.makedirs(run.env["FSDP_STORE_PATH"])
    load = os.getloadavg()[0]
    rc, out, err, secs, rss, _ = run_process(run.command, run.env, a.timeout, on_line)
    if rc != 0:
        raise RuntimeError("exit %d: %s" % (rc, tail(err or out)))
    try:
        m = parse_train_gpt(out, a, world or run.world)
    except ValueError as e:
        raise RuntimeError("%s: %s" % (e, tail(out))) from None
    # /proc counts clock ticks (10 ms): below 0.2 s in all, the figure would be noise.
    if len(marks) == 2 and marks[a.steps - 1] - marks[a.warmup - 1] >= 0.2:
        m["cpu_ms_per_step"] = 1000.0 * (marks[a.steps - 1] - marks[a.warmup - 1]) / (
            a.steps - a.warmup)
    m.update(loadavg=load, seconds=secs, rss_mib=rss)
    return m


def measure_concurrent(run, a):
    """W copies of a one-rank run at once: together they do what W perfectly independent ranks
    would, on this host at this moment (shared caches, memory bandwidth, other jobs)."""
    results = [None] * run.world

    def one(i):
        try:
            results[i] = measure_ours(run, a, 1)
        except RuntimeError as e:
            results[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(run.world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        if isinstance(r, RuntimeError):
            raise r
    tokens_per_s = sum(r["tokens_per_s"] for r in results)
    cpu = [r.get("cpu_ms_per_step") for r in results]
    return {"tokens_per_s": tokens_per_s,
            "ms_per_step": 1000.0 * tokens_per_step(a, run.world) / tokens_per_s,
            "cpu_ms_per_step": None if None in cpu else sum(cpu),
            "step_ms": [max(x) for x in zip(*(r["step_ms"] for r in results))],
            "losses": results[0]["losses"], "exposed_comm_pct": None,
            "peak_mib": [r["peak_mib"][0] for r in results],
            "rss_mib": max(r["rss_mib"] for r in results),
            "loadavg": results[0]["loadavg"], "seconds": max(r["seconds"] for r in results),
            "processes": results}


def torch_version(python):
    """The torch version `python` imports, or None with the reason."""
    if python is None:
        return None, "no python for PyTorch"
    try:
        p = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True, timeout=300)
    except OSError as e:
        return None, "cannot run %s: %s" % (python, e.strerror)
    if p.returncode != 0:
        return None, "%s cannot import torch: %s" % (python, tail(p.stderr, 1))
    return p.stdout.strip(), None


TORCH_NAMES = {"unsharded": "PyTorch unsharded", "fsdp1": "PyTorch FSDP1 gloo",
               "fsdp2": "PyTorch FSDP2 gloo"}


def torch_runs(a, python, init, version, note):
    runs = []
    for mode, world in (("unsharded", 1), ("fsdp1", a.ranks), ("fsdp2", a.ranks)):
        cmd = [python or "python3", TORCH_SCRIPT, "--mode", mode, "--ranks", str(world)] + \
            model_flags(a) + ["--batch", str(a.batch), "--steps", str(a.steps), "--warmup",
                              str(a.warmup), "--lr", str(a.lr), "--data", a.data, "--load",
                              init, "--threads", "1"]
        r = Run(TORCH_NAMES[mode], "torch", world, cmd,
                {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
        if version is None:
            r.status = "skipped: " + note
        runs.append(r)
    return runs


class Unavailable(Exception):
    pass


def measure_torch(run, a):
    load = os.getloadavg()[0]
    rc, out, err, secs, rss, _ = run_process(run.command, run.env, a.timeout)
    if rc == TORCH_UNAVAILABLE:
        raise Unavailable(tail(err, 1))
    if rc != 0:
        raise RuntimeError("exit %d: %s" % (rc, tail(err or out)))
    r = json.loads(out.strip().splitlines()[-1])
    return {"ms_per_step": r["ms_per_step"], "tokens_per_s": r["tokens_per_s"],
            "cpu_ms_per_step": r["cpu_ms_per_step"], "step_ms": r["step_ms"],
            "losses": r["losses"], "peak_mib": [], "rss_per_rank_mib": r["peak_rss_mib"],
            "rss_mib": rss, "loadavg": load, "seconds": secs}


def run_round(run, a):
    """One measurement of `run`. A failure of ours ends the run (it is a bug); PyTorch's FSDP1
    ranks over gloo abort now and then on this host (SIGABRT in a rank, the next try passes), so
    a failed PyTorch round is kept in run.failures and tried again in the next round."""
    if run.status.startswith(("skipped", "unavailable")):
        return
    if run.status.startswith("failed") and (run.kind != "torch" or
                                            len(run.failures) >= a.rounds):
        return
    print("running %s (%d rank(s))..." % (run.name, run.world), file=sys.stderr, flush=True)
    try:
        measure = {"ours": measure_ours, "concurrent": measure_concurrent,
                   "torch": measure_torch}[run.kind]
        run.rounds.append(measure(run, a))
        run.status = "ok"
    except Unavailable as e:
        run.status = "unavailable: %s" % e
    except RuntimeError as e:
        if run.kind == "torch":
            run.failures.append(str(e))
            print("  %s failed (tried again next round): %s" % (run.name, str(e)[-160:]),
                  file=sys.stderr, flush=True)
        if not run.rounds:
            run.status = "failed: %s" % e


def ratio(num, den):
    return None if num is None or den in (None, 0) else num / den


def ratios(runs, a):
    """The issue's ratios, each with its target (None: reported, no target), and beside them
    what does not depend on the host's load: CPU-time ratios (other jobs stretch wall time, far
    less the CPU time a step needs; busy-polling counts as CPU time) and the multi-rank runs
    against W one-rank jobs run at once (what W independent ranks get from the host)."""
    by = {(r.name, r.world): r for r in runs if r.ok()}

    def get(name, world, key):
        r = by.get((name, world))
        return r.get(key) if r else None

    out = []

    def add(what, value, target=None, better="lower"):
        met = None
        if value is not None and target is not None:
            met = value <= target if better == "lower" else value >= target
        out.append({"what": what, "value": value, "target": target, "better": better,
                    "met": met})

    add("FSDP world 1 step / unsharded step", ratio(
        get("ours FSDP threads", 1, "ms_per_step"), get("ours unsharded", 1, "ms_per_step")),
        TARGETS["world1_overhead"], "lower")
    add("  the same in CPU time", ratio(get("ours FSDP threads", 1, "cpu_ms_per_step"),
                                        get("ours unsharded", 1, "cpu_ms_per_step")),
        TARGETS["world1_overhead"], "lower")
    multi = [r for r in runs if r.kind == "ours" and r.world == a.ranks and r.ok()
             and r.name != BF16_RUN]
    w1_tps = get("ours FSDP threads", 1, "tokens_per_s")
    ceiling = get("unsharded x%d" % a.ranks, a.ranks, "tokens_per_s")
    add("host ceiling: %d unsharded jobs at once / world-1 tokens/s" % a.ranks,
        ratio(ceiling, w1_tps))
    for r in multi:
        add("%s: %d-rank tokens/s / world-1 tokens/s" % (r.name, a.ranks),
            ratio(r.get("tokens_per_s"), w1_tps), TARGETS["scaling"], "higher")
        add("  / %d unsharded jobs at once (the runtime's share of the host)" % a.ranks,
            ratio(r.get("tokens_per_s"), ceiling))
    for r in multi:
        add("%s: exposed communication %% of step" % r.name, r.get("exposed_comm_pct"),
            TARGETS["exposed_comm_pct"], "lower")

    # Mixed precision against float32, both FSDP on threads at a.ranks ranks.
    add("bf16 step / float32 step (threads, %d ranks)" % a.ranks, ratio(
        get(BF16_RUN, a.ranks, "ms_per_step"), get("ours FSDP threads", a.ranks, "ms_per_step")),
        TARGETS["bf16_step"], "lower")
    add("  the same in CPU time", ratio(get(BF16_RUN, a.ranks, "cpu_ms_per_step"),
                                        get("ours FSDP threads", a.ranks, "cpu_ms_per_step")),
        TARGETS["bf16_step"], "lower")
    for key, what in (("all_gather_mib", "all-gathered"), ("reduce_mib", "reduce-scattered")):
        add("bf16 bytes %s / float32's" % what, ratio(
            get(BF16_RUN, a.ranks, key), get("ours FSDP threads", a.ranks, key)),
            TARGETS["bf16_bytes"], "lower")
    bf16_peak, fp32_peak = get(BF16_RUN, a.ranks, "peak_mib"), \
        get("ours FSDP threads", a.ranks, "peak_mib")
    add("bf16 peak memory / float32's (rank 0)", ratio(bf16_peak[0] if bf16_peak else None,
                                                       fp32_peak[0] if fp32_peak else None),
        TARGETS["bf16_peak"], "lower")

    def versus(ours_name, ours_world, torch_name, torch_world, target=None):
        label = "%s%s tokens/s / %s" % (ours_name, "" if ours_world == 1 else
                                        " %d ranks" % ours_world, torch_name)
        add(label, ratio(get(ours_name, ours_world, "tokens_per_s"),
                         get(torch_name, torch_world, "tokens_per_s")), target, "higher")
        add("  the same per CPU-second", ratio(get(torch_name, torch_world, "cpu_ms_per_step"),
                                               get(ours_name, ours_world, "cpu_ms_per_step")),
            None, "higher")

    versus("ours unsharded", 1, TORCH_NAMES["unsharded"], 1)
    for torch_name in (TORCH_NAMES["fsdp1"], TORCH_NAMES["fsdp2"]):
        for r in multi:
            versus(r.name, a.ranks, torch_name, a.ranks,
                   TARGETS["vs_fsdp2"] if torch_name == TORCH_NAMES["fsdp2"] else None)

    # What bounds that ratio: the step's matrix products replayed alone through OpenBLAS
    # (bench_gemm_bound; the replay's time moves a few percent between runs where a whole step
    # moves 10-15% on this VM). A rank doing nothing but its products, times the ranks (perfect
    # scaling, free communication), against FSDP2: the most any runtime on this BLAS reaches.
    bound = getattr(a, "gemm_bound", None)
    if bound:
        ceiling = bound["ceiling_tokens_per_s"]
        add("products-alone ceiling tokens/s (1 core) / ours unsharded",
            ratio(ceiling, get("ours unsharded", 1, "tokens_per_s")))
        for r in multi:
            add("%s: %d-rank tokens/s / %d ranks at the ceiling" % (r.name, a.ranks, a.ranks),
                ratio(r.get("tokens_per_s"), a.ranks * ceiling))
        add("%d ranks at the products-alone ceiling / %s" % (a.ranks, TORCH_NAMES["fsdp2"]),
            ratio(a.ranks * ceiling, get(TORCH_NAMES["fsdp2"], a.ranks, "tokens_per_s")),
            TARGETS["vs_fsdp2"], "higher")
    return out


def gemm_bound(a, build, blas_env):
    """bench_gemm_bound's JSON for this model (the step's products replayed alone through
    OpenBLAS on one core: a ceiling on tokens/s per rank), or None when it is not built."""
    exe = os.path.join(build, "bench", "core", "bench_gemm_bound")
    if not os.access(exe, os.X_OK):
        print("bench_gemm_bound not built (ninja -C %s bench/core/bench_gemm_bound): the "
              "ceiling rows are left out" % a.build)
        return None
    with tempfile.TemporaryDirectory(prefix="bench-gemm-") as tmp:
        path = os.path.join(tmp, "bound.json")
        rc, out, err, *_ = run_process([exe] + model_flags(a) + [
            "--batch", str(a.batch), "--json", path], blas_env, a.timeout)
        if rc != 0:
            print("bench_gemm_bound failed: " + tail(err or out))
            return None
        print(out.rstrip())
        with open(path) as f:
            return json.load(f)


def loss_agreement(runs):
    """Per run: the largest relative difference of its losses from the first run with the same
    global batch (same weights, same data: the same losses up to float rounding)."""
    first = {}
    for r in runs:
        if not r.ok():
            continue
        ref = first.setdefault(r.batch_world, r)
        for m in r.rounds:
            m["loss_reference"] = ref.name
            m["loss_max_rel_diff"] = max(abs(x - y) / max(abs(y), 1e-12)
                                         for x, y in zip(m["losses"], ref.rounds[0]["losses"]))


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def print_table(runs, rat, a, version, note, blas_note):
    print("GPT L%d D%d H%d T%d, batch %d per rank, AdamW, 1 thread per rank, %d CPUs" % (
        a.layers, a.d_model, a.heads, a.seq, a.batch, os.cpu_count()))
    print("%d steps, median of steps %d..%d, best of %d round(s)" % (
        a.steps, a.warmup, a.steps - 1, a.rounds))
    print("PyTorch: %s" % (version or note))
    print("Ours: %s" % blas_note)
    cols = "%-18s %2s %7s %7s %7s %5s %5s %-11s %4s %-13s %6s %4s"
    print(cols % ("run", "W", "ms/step", "tok/s", "CPUms", "cores", "comm%", "peak MiB",
                  "RSS", "loss 0->last", "dloss", "load"))
    for r in runs:
        if not r.ok():
            print("%-18s %2d  %s" % (r.name, r.world, r.status))
            continue
        m = r.best()
        peak = "/".join("%.1f" % x for x in m["peak_mib"]) or "-"
        cores = ratio(m.get("cpu_ms_per_step"), m["ms_per_step"])
        print(cols % (r.name, r.world, fmt(m["ms_per_step"], ".1f"),
                      fmt(m["tokens_per_s"], ".0f"), fmt(m.get("cpu_ms_per_step"), ".0f"),
                      fmt(cores, ".2f"), fmt(m.get("exposed_comm_pct"), ".1f"), peak,
                      fmt(m["rss_mib"], ".0f"),
                      "%.3f->%.3f" % (m["losses"][0], m["losses"][-1]),
                      fmt(m.get("loss_max_rel_diff"), ".0e"), fmt(m["loadavg"], ".1f")))
    for r in runs:
        if r.failures:
            print("%s: %d round(s) failed and were tried again: %s" % (
                r.name, len(r.failures), r.failures[-1][-160:]))
    print("\n".join([
        "W: ranks. CPUms: CPU time per step, all ranks and threads. cores: CPUms / ms/step, the",
        "cores the run had (a 2-rank run below 2 shared its cores with other jobs). comm%: time",
        "blocked on collectives. peak MiB: our allocator's peak per rank. RSS: the largest",
        "process's maximum resident set (MiB). dloss: largest relative loss difference from",
        "the first run with the same global batch. load: 1-min load average at the run's start.",
        "unsharded xW: W unsharded one-rank jobs at once (tokens/s: their sum), the most that W",
        "independent ranks get from this host at this moment."]))
    print()
    print("%-64s %7s %8s" % ("ratio", "value", "target"))
    for x in rat:
        target = "" if x["target"] is None else ("%s %g" % ("<=" if x["better"] == "lower"
                                                            else ">=", x["target"]))
        verdict = {True: "met", False: "MISSED", None: ""}[x["met"]]
        print("%-64s %7s %8s  %s" % (x["what"], fmt(x["value"], ".3f"), target, verdict))


def git_state():
    def git(*args):
        p = subprocess.run(["git", "-C", ROOT] + list(args), capture_output=True, text=True)
        return p.stdout.strip() if p.returncode == 0 else None
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "core", "comm", "fsdp",
                "examples", "policies")
    return {"commit": git("rev-parse", "HEAD"), "runtime_sources_modified": bool(dirty)}


def show(path):
    """Prints the table and ratios of a saved result (the ratios as this version computes them)."""
    with open(path) as f:
        saved = json.load(f)
    c = saved["config"]
    a = argparse.Namespace(layers=c["layers"], d_model=c["d_model"], heads=c["heads"],
                           seq=c["seq"], batch=c["batch_per_rank"], ranks=c["ranks"],
                           steps=c["steps"], warmup=c["warmup"], rounds=c["rounds"],
                           gemm_bound=saved.get("gemm_bound"))
    runs = []
    for j in saved["runs"]:
        r = Run(j["name"], j["kind"], j["world"], j["command"], j["env"],
                j.get("batch_world"))
        r.status, r.rounds, r.failures = j["status"], j["rounds"], j.get("failures", [])
        runs.append(r)
    print_table(runs, ratios(runs, a), a, saved["torch_version"], saved["torch_note"],
                saved.get("openblas", "?"))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="the Meson build directory")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8, help="sequences per rank per step")
    ap.add_argument("--ranks", type=int, default=2, help="ranks of the multi-rank runs")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2, help="first steps left out of the median")
    ap.add_argument("--rounds", type=int, default=3,
                    help="run every configuration this many times, interleaved; keep the best")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--data", default=os.path.join(ROOT, "tests", "fixtures", "gpt", "data.txt"))
    ap.add_argument("--torch-python", help="python with a current torch (default: "
                    "/opt/torch2/bin/python if present, else python3)")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch runs")
    ap.add_argument("--openblas-coretype", default="auto",
                    help="auto (name the CPU's kernels when OpenBLAS falls back to Prescott's), "
                    "none (OpenBLAS's own choice) or an OPENBLAS_CORETYPE value")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per run")
    ap.add_argument("--json", help="default: <build>/bench-results/fsdp_train.json")
    ap.add_argument("--show", metavar="JSON", help="print the table of a saved result; run nothing")
    a = ap.parse_args(argv)
    if a.show:
        return show(a.show)
    if a.warmup < 1 or a.steps <= a.warmup + 1 or a.rounds < 1:
        ap.error("need --warmup >= 1, --steps > --warmup + 1 and --rounds >= 1")
    build = os.path.join(ROOT, a.build) if not os.path.isabs(a.build) else a.build
    train_gpt = os.path.join(build, "examples", "train_gpt")
    if not os.access(train_gpt, os.X_OK):
        sys.exit("bench_fsdp_train: %s not found: build it first (ninja -C %s "
                 "examples/train_gpt)" % (train_gpt, a.build))
    a.data = os.path.abspath(a.data)
    json_path = os.path.abspath(a.json or os.path.join(build, "bench-results",
                                                       "fsdp_train.json"))

    python = a.torch_python
    if python is None:
        python = "/opt/torch2/bin/python" if os.access("/opt/torch2/bin/python", os.X_OK) \
            else shutil.which("python3")
    version, note = (None, "not run (--no-torch)") if a.no_torch else \
        torch_version(python)
    blas_env, blas_note = openblas_setting(a.openblas_coretype, train_gpt)

    with tempfile.TemporaryDirectory(prefix="bench-fsdp-") as tmp:
        init = os.path.join(tmp, "init.safetensors")
        rc, out, err, *_ = run_process([train_gpt] + model_flags(a) + [
            "--steps", "0", "--sharding", "none", "--ranks", "1", "--data", a.data,
            "--save", init], {}, a.timeout)
        if rc != 0:
            sys.exit("bench_fsdp_train: writing the initial weights failed: " + tail(err or out))
        runs = ours(a, train_gpt, init, tmp, blas_env) + \
            torch_runs(a, python, init, version, note)
        for _ in range(a.rounds):
            for run in runs:
                run_round(run, a)

    loss_agreement(runs)
    a.gemm_bound = gemm_bound(a, build, blas_env)
    rat = ratios(runs, a)
    print_table(runs, rat, a, version, note, blas_note)
    os.makedirs(os.path.dirname(json_path), exist_ok=True)
    with open(json_path, "w") as f:
        json.dump({"benchmark": "fsdp_train",
                   "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                   "git": git_state(), "cpus": os.cpu_count(),
                   "train_gpt_built": datetime.datetime.fromtimestamp(
                       os.path.getmtime(train_gpt), datetime.timezone.utc).isoformat(),
                   "config": {"layers": a.layers, "d_model": a.d_model, "heads": a.heads,
                              "seq": a.seq, "batch_per_rank": a.batch, "ranks": a.ranks,
                              "steps": a.steps, "warmup": a.warmup, "rounds": a.rounds,
                              "lr": a.lr, "optimizer": "adamw", "threads_per_rank": 1,
                              "data": os.path.relpath(a.data, ROOT)},
                   "torch_version": version, "torch_note": note, "openblas": blas_note,
                   "targets": TARGETS, "runs": [r.to_json() for r in runs], "ratios": rat,
                   "gemm_bound": a.gemm_bound},
                  f, indent=1)
    print("\nwrote %s" % json_path)
    return 1 if any(r.status.startswith("failed") for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
