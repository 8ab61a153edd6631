#!/usr/bin/env python3
"""bench/models: the fine-tuning step of examples/finetune against transformers' (issue 26,
item 7), on the same threads, in the same run.

Makes (with transformers, --torch-python) a small GPT-2 and a small Llama with grouped-query
attention from configs (default: 4 layers, hidden 256, 8 heads, Llama 2 key/value heads, vocab
8192, no dropout), random weights saved with save_pretrained, and a random llm.c token file; then
trains each --rounds times, the rounds interleaved, as
  ours:         build/examples/finetune --sharding none --ranks 1 --threads-per-rank N
  transformers: finetune_torch.py (tools/torch_reference/finetune_ref.py's step: AutoModel-
                ForCausalLM float32, torch's AdamW, the same batches), torch.set_num_threads(N)
with the same --seq, --batch, --lr and data. A round's time is the median step after --warmup;
the best round counts (other jobs on a shared host only ever add time). Prints tokens/s of each
and ours / transformers' (target >= 1.0), and how far the losses of the two agree (the same
weights and data: they must, or the comparison is void).

    bench/models/bench_finetune.py [--build build] [--iters 6] [--warmup 2] [--rounds 3]
        [--threads 2] [--models gpt2,llama] [--layers 4] [--hidden 256] [--seq 256] [--batch 4]
        [--json FILE]

Exits 2 with "bench_finetune: error: <what>" on a bad command line, 77 when no python imports
transformers. Python's standard library only (bench/fsdp's helpers for processes and OpenBLAS).
"""
import argparse
import datetime
import json
import os
import random
import re
import statistics
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench", "fsdp"))
sys.path.insert(0, os.path.join(ROOT, "bench", "common"))
from bench_cli import Parser, UsageError, at_least, parse_or_exit  # noqa: E402
from bench_fsdp_train import openblas_setting, run_process, tail  # noqa: E402

PROGRAM = "bench_finetune"
TORCH_PYTHONS = ["/opt/torch2/bin/python", "/usr/bin/python3"]  # bench/common/torch_python.h
TARGET = 1.0  # issue 26: our tokens/s >= transformers' on the same threads
LOSS_TOLERANCE = 1e-3  # relative; the step count is small, float32 on both sides

MAKE_MODELS = r"""
import sys, torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
out, L, H, heads, kv, V, T, inter, which = sys.argv[1:]
L, H, heads, kv, V, T, inter = map(int, (L, H, heads, kv, V, T, inter))
torch.manual_seed(0)
if "gpt2" in which.split(","):
    c = GPT2Config(n_embd=H, n_layer=L, n_head=heads, n_positions=T, vocab_size=V,
                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                   eos_token_id=0)
    GPT2LMHeadModel(c).save_pretrained(out + "/gpt2")
if "llama" in which.split(","):
    c = LlamaConfig(hidden_size=H, intermediate_size=inter, num_hidden_layers=L,
                    num_attention_heads=heads, num_key_value_heads=kv, vocab_size=V,
                    max_position_embeddings=T, tie_word_embeddings=False)
    LlamaForCausalLM(c).save_pretrained(out + "/llama")
print(torch.__version__)
"""


def parse(argv):
    p = Parser(prog=PROGRAM, description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--iters", type=at_least("--iters"), default=6,
                   help="timed steps per round (median)")
    p.add_argument("--warmup", type=at_least("--warmup", 0), default=2)
    p.add_argument("--rounds", type=at_least("--rounds"), default=3)
    p.add_argument("--threads", type=at_least("--threads"), default=2)
    p.add_argument("--models", default="gpt2,llama")
    p.add_argument("--layers", type=at_least("--layers"), default=4)
    p.add_argument("--hidden", type=at_least("--hidden"), default=256)
    p.add_argument("--heads", type=at_least("--heads"), default=8)
    p.add_argument("--kv-heads", type=at_least("--kv-heads"), default=2)
    p.add_argument("--intermediate", type=at_least("--intermediate"), default=0,
                   help="Llama's intermediate_size (default 3 x hidden)")
    p.add_argument("--vocab", type=at_least("--vocab", 2), default=8192)
    p.add_argument("--seq", type=at_least("--seq"), default=256)
    p.add_argument("--batch", type=at_least("--batch"), default=4)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--torch-python")
    p.add_argument("--openblas-coretype", default="auto")
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds per run")
    p.add_argument("--json")
    a = p.parse_args(argv)
    models = a.models.split(",")
    for m in models:
        if m not in ("gpt2", "llama"):
            raise UsageError("--models: '%s' is not gpt2 or llama" % m)
    a.models = models
    if a.heads % a.kv_heads or a.hidden % a.heads:
        raise UsageError("--heads %d must divide --hidden %d and be a multiple of --kv-heads %d"
                         % (a.heads, a.hidden, a.kv_heads))
    if a.vocab > 65536:
        raise UsageError("--vocab %d: the token file holds uint16 ids (at most 65536)" % a.vocab)
    a.intermediate = a.intermediate or 3 * a.hidden
    return a


def torch_python(a):
    for py in [a.torch_python] if a.torch_python else TORCH_PYTHONS:
        if os.path.exists(py) and subprocess.run(
                [py, "-c", "import torch, transformers"], capture_output=True).returncode == 0:
            return py
    return None


def write_tokens(path, vocab, count):
    """An llm.c token file (GPT-2's layout: magic 20240520, version 1, uint16) of random ids."""
    rng = random.Random(0)
    header = struct.pack("<256i", 20240520, 1, count, *([0] * 253))
    with open(path, "wb") as f:
        f.write(header)
        f.write(struct.pack("<%dH" % count, *(rng.randrange(vocab) for _ in range(count))))


STEP_RE = re.compile(r"^step (\d+) loss (\S+) tokens/s (\S+)$", re.M)


def measure_ours(a, exe, model_dir, data, env):
    steps = a.warmup + a.iters
    cmd = [exe, "--model-dir", model_dir, "--data", data, "--seq", str(a.seq), "--batch",
           str(a.batch), "--steps", str(steps), "--lr", str(a.lr), "--optimizer", "adamw",
           "--sharding", "none", "--ranks", "1", "--threads-per-rank", str(a.threads),
           "--log-every", "1"]
    rc, out, err, secs, rss, cpu = run_process(cmd, env, a.timeout)
    if rc != 0:
        raise RuntimeError("finetune exited %d: %s" % (rc, tail(err or out)))
    lines = STEP_RE.findall(out)
    if len(lines) != steps:
        raise RuntimeError("finetune printed %d step lines, expected %d" % (len(lines), steps))
    tokens = a.batch * a.seq
    return {"losses": [float(x) for _, x, _ in lines],
            "step_ms": [1000.0 * tokens / float(r) for _, _, r in lines],
            "rss_mib": rss, "cpu_s": cpu, "seconds": secs}


def measure_torch(a, python, model_dir, data):
    cmd = [python, os.path.join(HERE, "finetune_torch.py"), "--model-dir", model_dir, "--data",
           data, "--seq", str(a.seq), "--batch", str(a.batch), "--steps",
           str(a.warmup + a.iters), "--lr", str(a.lr), "--threads", str(a.threads)]
    env = {"OMP_NUM_THREADS": str(a.threads), "MKL_NUM_THREADS": str(a.threads)}
    rc, out, err, secs, rss, cpu = run_process(cmd, env, a.timeout)
    if rc != 0 or not out.strip():
        raise RuntimeError("finetune_torch.py exited %d: %s" % (rc, tail(err or out)))
    r = json.loads(out.strip().splitlines()[-1])
    r.update(rss_mib=rss, cpu_s=cpu, seconds=secs)
    return r


def summarise(m, a):
    m["ms_per_step"] = statistics.median(m["step_ms"][a.warmup:])
    m["tokens_per_s"] = 1000.0 * a.batch * a.seq / m["ms_per_step"]
    return m


def main(argv=None):
    a = parse_or_exit(PROGRAM, parse, sys.argv[1:] if argv is None else argv)
    exe = os.path.join(a.build, "examples", "finetune")
    if not os.access(exe, os.X_OK):
        print("%s: error: no %s (ninja -C %s examples/finetune)" % (PROGRAM, exe, a.build),
              file=sys.stderr)
        return 2
    python = torch_python(a)
    if python is None:
        print("%s: skipped: no python imports torch and transformers (the baseline)" % PROGRAM)
        return 77
    blas_env, blas_note = openblas_setting(a.openblas_coretype, exe)
    with tempfile.TemporaryDirectory(prefix="bench-finetune-") as tmp:
        p = subprocess.run([python, "-c", MAKE_MODELS, tmp, str(a.layers), str(a.hidden),
                            str(a.heads), str(a.kv_heads), str(a.vocab), str(a.seq),
                            str(a.intermediate), ",".join(a.models)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            print("%s: error: making the models failed: %s" % (PROGRAM, tail(p.stderr, 2)),
                  file=sys.stderr)
            return 1
        torch_version = p.stdout.strip().splitlines()[-1]
        data = os.path.join(tmp, "train.bin")
        write_tokens(data, a.vocab, max(4 * a.seq, (a.warmup + a.iters) * a.batch * a.seq + 1)
                     + a.seq + 2)
        runs = {(m, side): [] for m in a.models for side in ("ours", "transformers")}
        for r in range(a.rounds):
            for m in a.models:
                model_dir = os.path.join(tmp, m)
                print("round %d: %s ours..." % (r + 1, m), file=sys.stderr, flush=True)
                runs[(m, "ours")].append(summarise(measure_ours(a, exe, model_dir, data,
                                                                blas_env), a))
                print("round %d: %s transformers..." % (r + 1, m), file=sys.stderr, flush=True)
                runs[(m, "transformers")].append(summarise(measure_torch(a, python, model_dir,
                                                                         data), a))
    report = {"program": PROGRAM,
              "options": {"argv": [PROGRAM] + (sys.argv[1:] if argv is None else argv),
                          "iters": a.iters, "warmup": a.warmup, "threads": a.threads,
                          "rounds": a.rounds},
              "config": {"layers": a.layers, "hidden": a.hidden, "heads": a.heads,
                         "kv_heads": a.kv_heads, "intermediate": a.intermediate,
                         "vocab": a.vocab, "seq": a.seq, "batch": a.batch, "lr": a.lr},
              "torch_python": python, "torch_version": torch_version, "openblas": blas_note,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "rows": [], "ratios": {}}
    print("fine-tuning step, %d layers hidden %d heads %d (Llama kv %d) vocab %d, T %d batch %d, "
          "AdamW, %d thread(s); best of %d rounds, median of %d steps after %d"
          % (a.layers, a.hidden, a.heads, a.kv_heads, a.vocab, a.seq, a.batch, a.threads,
             a.rounds, a.iters, a.warmup))
    print("%s; torch %s (%s)" % (blas_note, torch_version, python))
    print("%-8s %-13s %10s %10s %12s %s" % ("model", "impl", "ms/step", "tokens/s", "max RSS MiB",
                                            "all rounds ms/step"))
    failed = False
    for m in a.models:
        best = {}
        for side in ("ours", "transformers"):
            b = min(runs[(m, side)], key=lambda x: x["ms_per_step"])
            best[side] = b
            row = {"model": m, "impl": side, "ms_per_step": b["ms_per_step"],
                   "tokens_per_s": b["tokens_per_s"], "rss_mib": b["rss_mib"],
                   "rounds_ms_per_step": [x["ms_per_step"] for x in runs[(m, side)]],
                   "losses": b["losses"]}
            if side == "transformers":
                row["attn_implementation"] = b.get("attn_implementation")
            report["rows"].append(row)
            print("%-8s %-13s %10.1f %10.0f %12.0f %s" % (
                m, side, b["ms_per_step"], b["tokens_per_s"], b["rss_mib"],
                " ".join("%.1f" % x for x in row["rounds_ms_per_step"])))
        ours, theirs = best["ours"], best["transformers"]
        ratio = ours["tokens_per_s"] / theirs["tokens_per_s"]
        worst = max(abs(x - y) / abs(y) for x, y in zip(ours["losses"], theirs["losses"]))
        report["ratios"]["%s_ours_vs_transformers" % m] = ratio
        report["%s_loss_max_rel_diff" % m] = worst
        agree = worst <= LOSS_TOLERANCE
        failed = failed or not agree
        print("%s: ours / transformers tokens/s %.2fx (target >= %.1fx: %s); losses agree to "
              "%.1e relative%s" % (m, ratio, TARGET, "met" if ratio >= TARGET else "NOT met",
                                   worst, "" if agree else " -- NOT the same training"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
        print("wrote %s" % a.json)
    if failed:
        print("%s: error: the losses of ours and transformers' differ by more than %g relative"
              % (PROGRAM, LOSS_TOLERANCE), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
