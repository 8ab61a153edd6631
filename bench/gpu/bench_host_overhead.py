#!/usr/bin/env python3
"""bench/gpu: the host's side of a train_gpt step on CUDA, measured without a GPU, against the
step time the GPU has at issue 25's target. train_gpt runs on the emulated CUDA device
(tests/gpu/emulation) with FSDP_EMU_SKIP_KERNELS=1: every launch, product, copy and memset is
checked, queued and ordered as usual but no device work is done, so a step takes what the host
spends issuing it (our ops, autograd, FSDP, the allocator, the runtime's calls). A GPU step is
only as fast as the host issues it: the host's time per step must stay well below the GPU's, or
no kernel speed can reach the MFU target. The baseline, in the same units: the step time at the
target MFU for the GPU batch, from llm.c's FLOP count (6N + 6*L*D*T a token) and the GPU's bf16
peak. The host time hardly depends on the batch (the same ops at any batch size), so a small
batch keeps the emulated device's memory small.

    bench/gpu/bench_host_overhead.py [--build build] [--batch 2] [--iters 20] [--warmup 3]
        [--gpu-batch 16] [--target-mfu 38] [--peak-tflops 989.4] [--sharding NO_SHARD]
        [--ranks 1] [--json FILE]
    bench/gpu/bench_host_overhead.py --tiny --iters 2 --warmup 1   (a smoke run)

Launches per step come from the emulated runtime's profile (FSDP_EMU_PROFILE=1) over two runs
(warmup + iters steps, and that plus iters more): their difference over iters steps.
The emulated runtime's cost per call stands in for the CUDA driver's (a few microseconds a
launch either way), and this machine's CPU for the GPU machine's: a guide, not a GPU figure.
Exits 2 with "bench_host_overhead: error: <what>" on a bad command line, 1 when a run fails.
"""
import datetime
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench", "common"))
from bench_cli import Parser, UsageError, at_least, parse_or_exit  # noqa: E402
from gpt_shape import add_shape_args, resolve_shape  # noqa: E402

PROGRAM = "bench_host_overhead"
H100_BF16_PEAK = 989.4  # TFLOPS, H100 SXM bf16 dense (examples/mfu.cpp's figure)
MAX_RATIO = 0.5  # the host's step at most half the GPU's: it stays ahead with room to spare


def positive_float(flag):
    def parse(text):
        try:
            v = float(text)
        except ValueError:
            v = float("nan")
        if not v > 0 or v == float("inf"):
            raise UsageError("%s: '%s' is not a finite number > 0" % (flag, text))
        return v
    return parse


def parse(argv):
    p = Parser(prog=PROGRAM, description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    add_shape_args(p)
    p.add_argument("--batch", type=at_least("--batch", 1), default=2,
                   help="sequences per step on the emulated device")
    p.add_argument("--iters", type=at_least("--iters", 1), default=20, help="timed steps")
    p.add_argument("--warmup", type=at_least("--warmup", 1), default=3,
                   help="untimed steps first (the allocator's first allocations)")
    p.add_argument("--gpu-batch", type=at_least("--gpu-batch", 1), default=16,
                   help="the batch of the GPU step the host's is compared with")
    p.add_argument("--target-mfu", type=positive_float("--target-mfu"), default=38.0)
    p.add_argument("--peak-tflops", type=positive_float("--peak-tflops"), default=H100_BF16_PEAK)
    p.add_argument("--sharding", default="NO_SHARD")
    p.add_argument("--ranks", type=at_least("--ranks", 1), default=1,
                   help="thread ranks sharing the emulated cuda:0")
    p.add_argument("--mixed-precision", default="bf16")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    p.add_argument("--json")
    a = p.parse_args(argv)
    resolve_shape(a)
    return a


def emulated_env(a):
    libs = os.path.join(a.build, "tests", "gpu", "emulation")
    if not os.path.exists(os.path.join(libs, "libcudart.so.13")):
        sys.exit("%s: no emulated CUDA libraries in %s (a build with -Dcuda=enabled)" %
                 (PROGRAM, libs))
    env = dict(os.environ, FSDP_EMU_SKIP_KERNELS="1", FSDP_EMU_PROFILE="1")
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        [libs] + ([env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH") else []))
    # Memory is host memory here: enough for the batch's activations at GPT-2's size.
    env.setdefault("FSDP_EMU_CUDA_MEMORY_BYTES", str(16 << 30))
    return env


def run(a, steps, env):
    """(per-step host seconds of the steps after the warmup, kernel launches in the run, the
    model's parameters)."""
    cmd = [os.path.join(a.build, "examples", "train_gpt"), "--device", "cuda:0",
           "--layers", str(a.layers), "--d-model", str(a.d_model), "--heads", str(a.heads),
           "--seq", str(a.seq), "--vocab", str(a.vocab), "--synthetic-tokens",
           "--batch", str(a.batch), "--steps", str(steps), "--sharding", a.sharding,
           "--ranks", str(a.ranks), "--allow-nonfinite"]
    if a.mixed_precision != "none":
        cmd += ["--mixed-precision", a.mixed_precision]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, env=env)
    out = p.stdout + p.stderr
    if p.returncode != 0:
        sys.exit("%s: train_gpt failed (exit %d): %s\n%s" % (PROGRAM, p.returncode,
                                                             " ".join(cmd), out[-2000:]))
    if not re.search(r"FSDP_EMU_SKIP_KERNELS: skipped [1-9]", out):
        sys.exit("%s: the emulated runtime did not skip the device work:\n%s" % (PROGRAM,
                                                                                out[-2000:]))
    tokens = a.batch * a.seq * a.ranks
    rates = [float(r) for r in re.findall(r"^step \d+ loss \S+ tokens/s (\S+)", out, re.M)]
    launches = re.search(r"^emulated CUDA profile: (\d+) kernel launches$", out, re.M)
    params = re.search(r"^model: .*: (\d+) parameters", out, re.M)
    if len(rates) != steps or launches is None or params is None:
        sys.exit("%s: no step lines, model line or profile in train_gpt's output:\n%s" %
                 (PROGRAM, out[-2000:]))
    return [tokens / r for r in rates[a.warmup:]], int(launches.group(1)), int(params.group(1))


def main(argv=None):
    a = parse_or_exit(PROGRAM, parse, sys.argv[1:] if argv is None else argv)
    env = emulated_env(a)
    short = a.warmup + a.iters
    step_s, launches_short, params = run(a, short, env)
    _, launches_long, _ = run(a, short + a.iters, env)
    launches = (launches_long - launches_short) / a.iters
    host_ms = 1e3 * statistics.median(step_s)
    # The baseline: the GPU's step at the target MFU, gpu_batch sequences per rank.
    flops = 6 * params + 6 * a.layers * a.d_model * a.seq
    # Thread ranks share the one GPU: its step does every rank's batch.
    gpu_ms = 1e3 * a.ranks * a.gpu_batch * a.seq * flops / (
        a.target_mfu / 100 * a.peak_tflops * 1e12)
    ratio = host_ms / gpu_ms
    config = "GPT L%d D%d H%d T%d V%d, %s %s, %d rank(s)" % (
        a.layers, a.d_model, a.heads, a.seq, a.vocab, a.sharding, a.mixed_precision, a.ranks)
    print("%s: %s; the emulated device, device work skipped" % (PROGRAM, config))
    print("host ms/step (median of %d steps, batch %d): %.2f" % (a.iters, a.batch, host_ms))
    print("kernel launches per step: %.0f (cuBLASLt products not counted); host us per launch "
          "(the step's host time over them): %.1f" %
          (launches, 1e3 * host_ms / launches if launches else float("nan")))
    print("GPU ms/step at the target (%.0f%% MFU of %g TFLOPS, batch %d a rank, %d rank(s) on "
          "one GPU, %d parameters): %.2f" %
          (a.target_mfu, a.peak_tflops, a.gpu_batch, a.ranks, params, gpu_ms))
    print("host / GPU step at the target: %.3f (the host keeps ahead while below %.1f)" %
          (ratio, MAX_RATIO))
    if a.json:
        rows = [dict(step=a.warmup + i, host_ms=1e3 * s) for i, s in enumerate(step_s)]
        report = dict(program=PROGRAM, options=dict(vars(a), argv=sys.argv),
                      date=datetime.datetime.now(datetime.timezone.utc).isoformat(),
                      config=config, host_ms_per_step=host_ms, launches_per_step=launches,
                      gpu_ms_per_step_at_target=gpu_ms, rows=rows,
                      ratios=dict(host_vs_gpu_step_at_target=ratio))
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
