#!/usr/bin/env python3
"""bench/gpu: examples/train_gpt against the same GPT in PyTorch eager (and torch.compile) on the
same GPU in the same run (issue 25, item 5): tokens/s and MFU of each, and ours / PyTorch's.

Shape: GPT-2 124M's (L12 D768 H12 T1024, vocab 50304), bf16 mixed precision with fp32 master
weights, AdamW, synthetic uniform tokens. The sides:
  ours:          build/examples/train_gpt --vocab V --synthetic-tokens --ranks 1 --device cuda
                 --mixed-precision bf16 --sharding NO_SHARD (mixed precision is FSDP's: at world
                 size 1 NO_SHARD is the plain model with fp32 master weights and bf16 compute);
                 timed by CUDA events from its second step (its first is the warm-up).
  torch eager:   tools/torch_reference/train_gpt_ref.py's GPT (the same modules and FQNs; the
                 blocks told the mask is causal, so attention is SDPA's flash kernel), fp32
                 weights under torch.autocast(bfloat16), AdamW fused where torch has it; CUDA
                 events around --iters steps after --warmup.
  torch compile: the same under torch.compile (--compile).
--batch auto tries 64, 32, 16, 8, 4 on each side and keeps the largest that fits (PyTorch's
OutOfMemoryError; ours: a non-zero exit with "out of memory" on stderr). MFU is llm.c's: (6N +
6*L*D*T) FLOP per token times tokens/s over the GPU's bf16 peak, the peak train_gpt printed (or
--peak-tflops).

    bench/gpu/bench_gpt.py [--build build] [--batch auto|N] [--iters 20] [--warmup 3]
        [--compile] [--json FILE]
    bench/gpu/bench_gpt.py --device cpu --tiny --batch 2 --iters 2 --warmup 1   (a smoke run)

Exits 2 with "bench_gpt: error: <what>" on a bad command line, 77 without torch (or, on cuda,
without a GPU), 1 when a side fails or a loss is not finite.
"""
import argparse
import datetime
import gc
import json
import math
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench", "common"))
from bench_cli import Parser, UsageError, at_least, parse_or_exit  # noqa: E402
from gpt_shape import add_shape_args, resolve_shape  # noqa: E402

PROGRAM = "bench_gpt"
AUTO_BATCHES = [64, 32, 16, 8, 4]
# Our caching allocator's "cuda:0 out of memory. Tried to allocate ...", or CUDA's own status.
OUT_OF_MEMORY = re.compile(r"out of memory|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED")
TARGET_RATIO, TARGET_MFU = 1.0, 38.0  # issue 25: tokens/s >= PyTorch eager's, MFU >= 38%


def batch_choice(text):
    return text if text == "auto" else at_least("--batch", 1)(text)


def parse(argv):
    p = Parser(prog=PROGRAM, description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--train-gpt", help="ours: the program to run (default BUILD/examples/train_gpt;"
                   " a wrapper that sets the environment, as tests/gpu/run_device_checks.sh's)")
    p.add_argument("--device", default="cuda", help="cuda | cpu (a smoke run)")
    add_shape_args(p)
    p.add_argument("--batch", type=batch_choice, default="auto", help="sequences per step, or auto")
    p.add_argument("--iters", type=at_least("--iters", 1), default=20, help="timed steps")
    p.add_argument("--warmup", type=at_least("--warmup", 0), default=3,
                   help="PyTorch's untimed steps first (ours: its first step)")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=at_least("--seed", 0), default=0)
    p.add_argument("--compile", action="store_true", help="also time torch.compile")
    p.add_argument("--sharding", default="NO_SHARD", help="ours: the strategy at world size 1")
    p.add_argument("--peak-tflops", type=float, default=0.0,
                   help="the MFU's peak (default: the one train_gpt prints for the GPU)")
    p.add_argument("--threads", type=at_least("--threads", 1), default=2, help="cpu: threads")
    p.add_argument("--no-ours", action="store_true")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per run of ours")
    p.add_argument("--json")
    a = p.parse_args(argv)
    if a.device not in ("cuda", "cpu"):
        raise UsageError("--device: '%s' is not cuda or cpu" % a.device)
    resolve_shape(a)
    if not (a.peak_tflops >= 0 and math.isfinite(a.peak_tflops)):
        raise UsageError("--peak-tflops: '%s' is not a finite number >= 0" % a.peak_tflops)
    return a


def flops_per_token(a, params):
    """llm.c's: 6N + 6*L*D*T (examples/mfu.h)."""
    return 6 * params + 6 * a.layers * a.d_model * a.seq


# --- ours: build/examples/train_gpt as a subprocess ---------------------------------------------

def ours_command(a, batch):
    program = a.train_gpt or os.path.join(a.build, "examples", "train_gpt")
    return [program, "--layers", str(a.layers),
            "--d-model", str(a.d_model), "--heads", str(a.heads), "--seq", str(a.seq),
            "--vocab", str(a.vocab), "--synthetic-tokens", "--seed", str(a.seed),
            "--batch", str(batch), "--steps", str(a.iters + 1), "--lr", str(a.lr),
            "--optimizer", "adamw", "--sharding", a.sharding, "--ranks", "1",
            "--device", a.device, "--mixed-precision", "bf16", "--threads-per-rank",
            str(a.threads)] + (["--peak-tflops", str(a.peak_tflops)] if a.peak_tflops else [])


def run_ours(a, batch):
    """A row, or ("oom", text) / ("fail", text)."""
    cmd = ours_command(a, batch)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    except subprocess.TimeoutExpired:
        return ("fail", "ran past %g s: %s" % (a.timeout, " ".join(cmd)))
    if p.returncode != 0:
        kind = "oom" if OUT_OF_MEMORY.search(p.stderr) else "fail"
        return (kind, "exit %d: %s" % (p.returncode, p.stderr.strip()[-400:]))
    out = p.stdout
    summary = re.search(r"^tokens/s (\S+)\s+ms/step (\S+)\s.*\(timed by ([^)]*)\)", out, re.M)
    params = re.search(r"^model: .*: (\d+) parameters", out, re.M)
    mfu = re.search(r"^MFU (\S+)% of (\S+) TFLOPS \((.*)\)$", out, re.M)
    losses = [float(l.split()[3]) for l in out.splitlines() if l.startswith("step ")]
    if not summary or not params or not losses:
        return ("fail", "no summary in its output:\n" + out[-600:])
    row = dict(side="ours", batch=batch, steps=a.iters, tokens_per_s=float(summary.group(1)),
               ms_per_step=float(summary.group(2)), params=int(params.group(1)),
               loss_first=losses[0], loss_last=losses[-1], losses=losses,
               notes="%s world 1, %s" % (a.sharding, summary.group(3)))
    if mfu:
        row.update(mfu_pct=float(mfu.group(1)), peak_tflops=float(mfu.group(2)),
                   peak_source=mfu.group(3))
    return row


# --- PyTorch: train_gpt_ref's GPT ---------------------------------------------------------------

def run_torch(a, torch, batch, compiled):
    """A row, or ("oom", text); other errors propagate."""
    sys.path.insert(0, os.path.join(ROOT, "tools", "torch_reference"))
    from train_gpt_ref import GPT, gpt_init
    import torch.nn.functional as F
    cuda = a.device == "cuda"
    torch.manual_seed(a.seed)
    try:
        model = GPT(a.layers, a.d_model, a.heads, a.seq, a.vocab)
        model.causal_hint = True
        gpt_init(model)
        model.to(a.device)
        params = sum(p.numel() for p in model.parameters())  # the tied weight once
        try:
            opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01,
                                    fused=cuda)
            kind = "fused AdamW" if cuda else "AdamW"
        except (TypeError, RuntimeError):  # a torch without fused AdamW
            opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
            kind = "AdamW (foreach)"
        forward = torch.compile(model) if compiled else model
        g = torch.Generator(device=a.device).manual_seed(a.seed)
        steps = a.warmup + a.iters
        data = torch.randint(0, a.vocab, (steps, batch, a.seq + 1), generator=g,
                             device=a.device)

        def step(i):
            with torch.autocast(device_type=a.device, dtype=torch.bfloat16):
                logits = forward(data[i, :, :-1])
                loss = F.cross_entropy(logits.reshape(-1, a.vocab), data[i, :, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss.detach()

        losses = [step(i) for i in range(a.warmup)]
        if cuda:
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            torch.cuda.synchronize()
            start.record()
        t0 = time.perf_counter()
        losses += [step(a.warmup + i) for i in range(a.iters)]
        if cuda:
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1000.0
        else:
            seconds = time.perf_counter() - t0
        losses = [float(x) for x in torch.stack(losses).tolist()]
        return dict(side="torch compile" if compiled else "torch eager", batch=batch,
                    steps=a.iters, tokens_per_s=batch * a.seq * a.iters / seconds,
                    ms_per_step=1000.0 * seconds / a.iters, params=params,
                    loss_first=losses[0], loss_last=losses[-1], losses=losses,
                    notes="%s, %s" % (kind, "CUDA events" if cuda else "host clock"))
    except torch.cuda.OutOfMemoryError as e:
        return ("oom", str(e).splitlines()[0])


def torch_side(a, torch, batch, compiled):
    """run_torch, then its memory back to the device (its frame is gone by now), so that the
    next batch or side starts with the whole GPU."""
    r = run_torch(a, torch, batch, compiled)
    gc.collect()
    if a.device == "cuda":
        torch.cuda.empty_cache()
    return r


def largest_that_fits(a, run):
    """(row, tried): the first batch of AUTO_BATCHES (or --batch) that runs; row is None when
    none did, and tried says why each failed."""
    tried = []
    for batch in AUTO_BATCHES if a.batch == "auto" else [a.batch]:
        r = run(batch)
        if isinstance(r, dict):
            return r, tried
        tried.append("batch %d: %s" % (batch, r[1]))
        if r[0] != "oom":
            break
    return None, tried


def main(argv=None):
    a = parse_or_exit(PROGRAM, parse, sys.argv[1:] if argv is None else argv)
    try:
        import torch
    except ImportError as e:
        print("SKIP: %s needs torch: %s" % (PROGRAM, e))
        return 77
    if a.device == "cuda" and not torch.cuda.is_available():
        print("SKIP: no CUDA device (torch.cuda.is_available() is false)")
        return 77
    torch.set_num_threads(a.threads)
    device_name = torch.cuda.get_device_name() if a.device == "cuda" else "the CPU"
    rows, failures = [], []
    # The baseline first: under a time limit (the device script's) a slow run of ours still
    # leaves PyTorch's number.
    sides = [] if a.no_torch else [("torch eager", lambda b: torch_side(a, torch, b, False))]
    if not a.no_ours:
        sides.append(("ours", lambda b: run_ours(a, b)))
    if a.compile and not a.no_torch:
        sides.append(("torch compile", lambda b: torch_side(a, torch, b, True)))
    for name, run in sides:
        row, tried = largest_that_fits(a, run)
        for t in tried:
            print("%s: %s" % (name, t), flush=True)
        if row is None:
            failures.append("%s: no batch ran" % name)
            continue
        print("%s: batch %d: %.0f tokens/s, %.1f ms/step" % (name, row["batch"],
                                                           row["tokens_per_s"],
                                                           row["ms_per_step"]), flush=True)
        rows.append(row)
    rows.sort(key=lambda r: r["side"] != "ours")  # ours first in the table
    ours = next((r for r in rows if r["side"] == "ours"), None)
    peak = a.peak_tflops or (ours or {}).get("peak_tflops", 0.0)
    peak_source = "--peak-tflops" if a.peak_tflops else (ours or {}).get("peak_source", "")
    for r in rows:
        if r["side"] != "ours" and peak:
            r["mfu_pct"] = 100.0 * flops_per_token(a, r["params"]) * r["tokens_per_s"] / (
                peak * 1e12)
        if not all(math.isfinite(x) for x in r["losses"]):
            failures.append("%s: a loss is not finite: %s" % (r["side"], r["losses"]))
    if ours and any(r["params"] != ours["params"] for r in rows):
        failures.append("the sides' parameter counts differ: %s" % {
            r["side"]: r["params"] for r in rows})

    print("%s: GPT L%d D%d H%d T%d V%d on %s; bf16 mixed precision, fp32 master weights, AdamW"
          % (PROGRAM, a.layers, a.d_model, a.heads, a.seq, a.vocab, device_name))
    print("%-14s %6s %6s %12s %10s %8s %22s  %s" % ("side", "batch", "steps", "tokens/s",
                                                    "ms/step", "MFU", "loss first -> last",
                                                    "notes"))
    for r in rows:
        mfu = "%.1f%%" % r["mfu_pct"] if "mfu_pct" in r else "n/a"
        print("%-14s %6d %6d %12.0f %10.1f %8s %22s  %s" % (
            r["side"], r["batch"], r["steps"], r["tokens_per_s"], r["ms_per_step"], mfu,
            "%.4f -> %.4f" % (r["loss_first"], r["loss_last"]), r["notes"]))
    ratios = {}
    for r in rows:
        if ours and r["side"] != "ours":
            key = "ours_vs_" + r["side"].replace(" ", "_")
            ratios[key] = ours["tokens_per_s"] / r["tokens_per_s"]
            print("ours / %s tokens/s: %.3fx (target >= %.1f)" % (r["side"], ratios[key],
                                                                  TARGET_RATIO))
    if ours and "mfu_pct" in ours:
        print("ours MFU %.1f%% (target >= %.0f%%) of %g TFLOPS (%s)" % (
            ours["mfu_pct"], TARGET_MFU, peak, peak_source))
    elif peak == 0:
        print("MFU: no peak known (give --peak-tflops)")
    for f in failures:
        print("%s: FAIL: %s" % (PROGRAM, f))
    if a.json:
        report = dict(program=PROGRAM, options=dict(vars(a), argv=sys.argv),
                      date=datetime.datetime.now(datetime.timezone.utc).isoformat(),
                      device=device_name, torch_version=torch.__version__,
                      config=dict(layers=a.layers, d_model=a.d_model, heads=a.heads, seq=a.seq,
                                  vocab=a.vocab),
                      peak_tflops=peak, peak_source=peak_source, rows=rows, ratios=ratios,
                      failures=failures)
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
