#!/usr/bin/env python3
"""Runs one bench program with its smallest settings and --json, and checks the report: it
parses, has bench/common's layout ("program", "options", "rows", "ratios") and this program's
rows and ratios, every ratio a finite positive number; and that a bad --iters (and a case's own
bad arguments) end the program with bench/common's one-line error and exit code 2, checked first
as it needs no device. So a broken bench fails the test suite.

    bench_smoke.py NAME EXE [EXTRA ARGS...]     (EXTRA ARGS go to the program, e.g. --plan PATH)

Exits 77 (skipped) where the program needs an absent tool: mpirun, or a python with torch; and
after the command-line checks where the program itself exits 77 (bench_gpu_kernels, no GPU).
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_RANKS = os.path.join(HERE, "..", "comm", "run_ranks.sh")
TORCH_PYTHONS = ["/opt/torch2/bin/python", "/usr/bin/python3"]  # bench/common/torch_python.h

# name: (program name in the report, smallest arguments, launcher, rows, row keys, ratio keys,
#        top-level keys besides the common ones, needs torch, may skip (77: no device),
#        [(bad arguments, bench/common's error line)])
MPI = ["mpirun", "--bind-to", "none", "-np", "2"]
GLOO = ["sh", RUN_RANKS, "mpirun", "2", "file"]
CASES = {
    "bench_attention": dict(
        args=["--iters", "1", "--warmup", "0", "--lengths", "32,64", "--heads", "1"],
        rows=2, row_keys=["length", "materialised_ms", "blocked_ms", "scores_not_held_mib"],
        ratios=["blocked_vs_materialised_L32", "blocked_vs_materialised_L64"], top=["heads"]),
    "bench_gemm_bound": dict(
        args=["--layers", "1", "--d-model", "32", "--heads", "2", "--seq", "16", "--vocab", "64",
              "--batch", "1", "--iters", "1", "--warmup", "0", "--versus", "1000"],
        rows=2, row_keys=["name", "ms", "tokens_per_s"],
        ratios=["products_share_of_step", "ranks_at_ceiling_vs_versus"],
        top=["config", "step_ms", "gemm_ms", "ceiling_tokens_per_s"]),  # bench_fsdp_train.py's
    "bench_training_step": dict(
        args=["--no-torch", "--iters", "1", "--warmup", "0", "--threads", "1", "--model", "demo"],
        rows=1, row_keys=["threads", "ours_ms", "ours_cpu_ms", "torch_ms"], ratios=[],
        top=["openblas_core"]),
    "bench_training_step_torch": dict(
        program="bench_training_step", torch=True,
        args=["--iters", "1", "--warmup", "0", "--threads", "1", "--model", "demo"],
        rows=1, row_keys=["threads", "ours_ms", "torch_ms", "ratio"],
        ratios=["demo_model_vs_torch_1t"], top=["torch_python", "torch_version"]),
    "bench_autowrap": dict(
        args=["--no-torch", "--iters", "1", "--blocks", "10", "--chains", "400,1600"],
        rows=4, row_keys=["case", "modules", "wrapped", "us_per_module"],
        ratios=["chain_1600_vs_400_us_per_module"], top=[]),
    "bench_plan": dict(
        args=["--no-torch", "--no-1m", "--iters", "1", "--blocks", "10"],
        rows=2, row_keys=["case", "wall_median_s", "wall_min_s", "cpu_median_s", "max_rss_kb"],
        ratios=[], top=["blocks_model"]),
    "bench_memory": dict(
        args=["--iters", "1", "--cycle-steps", "2", "--skip-train"],
        rows=1, row_keys=["benchmark", "caching", "malloc"],
        ratios=["cycle_ms_caching_vs_malloc"], top=["conditions"]),
    "bench_activation_checkpoint": dict(
        args=["--layers", "1", "--d-model", "32", "--heads", "2", "--seq", "16", "--batch", "1",
              "--iters", "1", "--warmup", "1", "--threads", "1"],
        rows=3, row_keys=["variant", "held_bytes", "peak_bytes", "step_ms", "max_loss_diff"],
        ratios=["full_held_vs_none", "full_time_vs_none", "selective_held_vs_none",
                "selective_peak_vs_none"], top=["config"]),
    "bench_checkpoint_io": dict(
        args=["--ranks", "1,2", "--iters", "1", "--layers", "1", "--d-model", "64", "--dir", "{tmp}"],
        rows=2, row_keys=["ranks", "bytes", "disk_write_s", "sharded_save_s", "full_load_s"],
        ratios=["sharded_save_vs_plain_pct_1r", "full_load_vs_plain_pct_2r"], top=["model"]),
    "bench_comm_threads": dict(
        args=["--ranks", "2", "--min-size", "1K", "--max-size", "4K", "--iters", "1"],
        rows=12, row_keys=["backend", "impl", "collective", "ranks", "bytes", "seconds"],
        ratios=["all_gather 1K memcpy vs fsdp", "all_reduce 4K memcpy vs fsdp"], top=[]),
    "bench_comm_mpi": dict(
        launcher=MPI, args=["--min-size", "1K", "--max-size", "1K", "--iters", "1"],
        rows=9, row_keys=["backend", "impl", "collective", "ranks", "bytes", "seconds"],
        ratios=["all_gather 1K MPI_Allgather vs fsdp", "all_reduce 1K MPI_Allreduce vs fsdp"],
        top=[]),
    "bench_comm_gloo": dict(
        launcher=GLOO, args=["--min-size", "1K", "--max-size", "1K", "--iters", "1"],
        rows=9, row_keys=["backend", "impl", "collective", "ranks", "bytes", "seconds"],
        ratios=["all_gather 1K gloo::allgather(ring) vs fsdp"], top=[]),
    "bench_llama_ops": dict(
        args=["--iters", "1", "--warmup", "0", "--seq", "64"],
        rows=4, row_keys=["op", "ms"], ratios=[], top=[]),
    "bench_tokenizer": dict(
        args=["--no-hf", "--kb", "64", "--iters", "1"],
        rows=2, row_keys=["impl", "seconds", "mb_per_s"], ratios=[], top=["text"],
        bad=[(["--kb", "0"], "--kb: '0' is not an integer >= 1")]),
    "bench_load_pretrained": dict(
        args=["--mb", "1", "--hidden", "64", "--vocab", "512", "--iters", "1", "--ranks", "2",
              "--dir", "{tmp}"],
        rows=6, row_keys=["path", "seconds"],
        ratios=["from_pretrained_vs_disk", "fsdp_2r_vs_disk"],
        top=["model", "eviction", "max_resident_after_evict"],
        bad=[(["--mb", "0"], "--mb: '0' is not an integer >= 1"),
             (["--hidden", "100"], "--hidden 100 is not a multiple of 64")]),
    # A Python driver: EXE is bench/models/bench_finetune.py, EXTRA ARGS its --build.
    "bench_finetune": dict(
        torch=True,
        args=["--iters", "1", "--warmup", "0", "--rounds", "1", "--threads", "1", "--layers",
              "1", "--hidden", "32", "--heads", "4", "--kv-heads", "2", "--vocab", "128",
              "--seq", "16", "--batch", "2"],
        rows=4, row_keys=["model", "impl", "ms_per_step", "tokens_per_s", "losses"],
        ratios=["gpt2_ours_vs_transformers", "llama_ours_vs_transformers"],
        top=["config", "torch_version", "gpt2_loss_max_rel_diff", "llama_loss_max_rel_diff"],
        bad=[(["--models", "bert"], "--models: 'bert' is not gpt2 or llama"),
             (["--heads", "3"], "--heads 3 must divide --hidden 256 and be a multiple of "
                                "--kv-heads 2")]),
    # A Python driver that imports torch itself: run by the torch python (torch_driver). EXE is
    # bench/gpu/bench_gpt.py, EXTRA ARGS its --build; on the CPU at a tiny shape. Both sides must
    # have trained: finite losses and tokens/s in every row.
    "bench_gpt": dict(
        torch=True, torch_driver=True,
        args=["--device", "cpu", "--tiny", "--batch", "2", "--iters", "2", "--warmup", "1",
              "--threads", "1"],
        rows=2, row_keys=["side", "batch", "tokens_per_s", "ms_per_step", "loss_first",
                          "loss_last", "params"],
        finite=["tokens_per_s", "loss_first", "loss_last"],
        ratios=["ours_vs_torch_eager"], top=["config", "device", "torch_version"],
        bad=[(["--batch", "0"], "--batch: '0' is not an integer >= 1"),
             (["--device", "tpu"], "--device: 'tpu' is not cuda or cpu")]),
    # A Python driver of train_gpt on the emulated CUDA device with its device work skipped. EXE
    # is bench/gpu/bench_host_overhead.py, EXTRA ARGS its --build.
    "bench_host_overhead": dict(
        args=["--tiny", "--iters", "2", "--warmup", "1"],
        rows=2, row_keys=["step", "host_ms"], finite=["host_ms"],
        ratios=["host_vs_gpu_step_at_target"],
        top=["config", "host_ms_per_step", "launches_per_step", "gpu_ms_per_step_at_target"],
        bad=[(["--target-mfu", "0"], "--target-mfu: '0' is not a finite number > 0"),
             (["--heads", "5"], "--heads 5 does not divide --d-model 768")]),
    "bench_gpu_kernels": dict(
        args=["--tokens", "1024", "--iters", "1", "--warmup", "0"], may_skip=True,
        rows=21, row_keys=["op", "ms", "flop"], ratios=[], top=["device", "tokens"],
        bad=[(["--tokens", "1500"], "--tokens 1500 is not a multiple of T=1024"),
             (["--tokens", "512"], "--tokens: '512' is not an integer >= 1024")]),
}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def skip(msg):
    print("SKIP: " + msg)
    sys.exit(77)


def torch_python():
    for py in TORCH_PYTHONS:
        if os.path.exists(py) and subprocess.run([py, "-c", "import torch"],
                                                 capture_output=True).returncode == 0:
            return py
    return None


def run(cmd, env):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired:
        fail("%s ran past 120 s" % " ".join(cmd))


def check_report(name, case, path, iters):
    program = case.get("program", name)
    try:
        with open(path) as f:
            rep = json.load(f)
    except (OSError, ValueError) as e:
        fail("%s: the --json report %s does not parse: %s" % (name, path, e))
    for key in ["program", "options", "rows", "ratios"] + case["top"]:
        if key not in rep:
            fail("%s: the report has no %r (keys: %s)" % (name, key, sorted(rep)))
    if rep["program"] != program:
        fail("%s: report's program is %r, want %r" % (name, rep["program"], program))
    opts = rep["options"]
    if "--json" not in opts.get("argv", []) or opts.get("iters") != iters:
        fail("%s: options %s lack the command line or iters %d" % (name, opts, iters))
    rows = rep["rows"]
    if not isinstance(rows, list) or len(rows) != case["rows"]:
        fail("%s: want %d rows, got %s" % (name, case["rows"], rows))
    for row in rows:
        missing = [k for k in case["row_keys"] if k not in row]
        if missing:
            fail("%s: a row lacks %s: %s" % (name, missing, row))
        for k in case.get("finite", []):
            if not isinstance(row[k], (int, float)) or not math.isfinite(row[k]):
                fail("%s: %s is %r in %s, not a finite number" % (name, k, row[k], row))
    ratios = rep["ratios"]
    if not isinstance(ratios, dict):
        fail("%s: ratios is not an object: %r" % (name, ratios))
    for k in case["ratios"]:
        if k not in ratios:
            fail("%s: no ratio %r (has %s)" % (name, k, sorted(ratios)))
    for k, v in ratios.items():
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            fail("%s: ratio %r is %r, not a finite positive number" % (name, k, v))


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in CASES:
        sys.exit("usage: bench_smoke.py {%s} EXE [ARGS...]" % ",".join(CASES))
    name, exe, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
    case = CASES[name]
    program = case.get("program", name)
    launcher = case.get("launcher", [])
    if launcher and not shutil.which("mpirun"):
        skip("%s runs under mpirun, which is not installed" % name)
    if case.get("torch") and not torch_python():
        skip("no python among %s imports torch (the baseline)" % TORCH_PYTHONS)
    if case.get("torch_driver"):  # a script that imports torch: run by that python
        exe = [torch_python(), exe]
    else:
        exe = [exe]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    # A bad common flag (and the case's own bad arguments): bench/common's one line and exit 2,
    # before any work (no launcher, no device).
    common_bad = [(["--iters", "0"], "--iters: '0' is not an integer >= 1")]
    for bad, msg in common_bad + case.get("bad", []):
        p = run(exe + bad, env)
        want = "%s: error: %s" % (program, msg)
        if p.returncode != 2 or p.stderr.strip() != want:
            fail("%s %s: exit %d, stderr %r; want exit 2 and %r" % (name, " ".join(bad),
                                                                   p.returncode, p.stderr, want))
    with tempfile.TemporaryDirectory(prefix="bench-smoke-") as tmp:
        args = [a.format(tmp=tmp) for a in case["args"]] + extra
        path = os.path.join(tmp, name + ".json")
        p = run(launcher + exe + args + ["--json", path], env)
        if p.returncode == 77 and case.get("may_skip"):
            skip("%s: command line as expected; the program skipped its run: %s"
                 % (name, p.stdout.strip()))
        if p.returncode != 0:
            fail("%s exited %d\nstdout:\n%s\nstderr:\n%s" % (name, p.returncode, p.stdout,
                                                              p.stderr))
        if not p.stdout.strip():
            fail("%s printed no table" % name)
        iters = int(args[args.index("--iters") + 1])
        check_report(name, case, path, iters)
        leftovers = [f for f in os.listdir(tmp) if f != name + ".json"]
        if leftovers:
            fail("%s left %s in its --dir" % (name, leftovers))
    print("%s: report and bad-flag error as expected" % name)


if __name__ == "__main__":
    main()
