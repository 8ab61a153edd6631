#!/usr/bin/env python3
"""train_gpt beyond bytes (issue 25, item 5): --vocab V with llm.c token files (training,
held-out, --save/--load and --export-model carrying V), a token id not below V refused naming the
file, the id and V, --synthetic-tokens (the stated count, the same tokens and losses for the same
--seed), and the MFU line's arithmetic with --peak-tflops: 6N + 6*L*D*T FLOP per token times one
rank's tokens/s over the peak, with N the parameter count (the tied head once).
Usage: test_train_gpt_tokens.py TRAIN_GPT
"""
import json
import math
import os
import random
import re
import struct
import subprocess
import sys
import tempfile

EXE = sys.argv[1]
tmp = tempfile.mkdtemp()
L, D, H, T, V = 1, 16, 2, 8, 300
MODEL = ["--layers", str(L), "--d-model", str(D), "--heads", str(H), "--seq", str(T)]
failures = []


def write_token_file(path, ids):
    """llm.c's GPT-2 format: 256 int32 (magic 20240520, version 1, count), then uint16 ids."""
    header = struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253))
    with open(path, "wb") as f:
        f.write(header + struct.pack("<%dH" % len(ids), *ids))


def run(flags):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    return subprocess.run([EXE, *MODEL, *flags], capture_output=True, text=True, timeout=120,
                          env=env)


def losses(r):
    return [float(l.split()[3]) for l in r.stdout.splitlines() if l.startswith("step ")]


def expect(name, ok, r=None):
    if not ok:
        failures.append(name)
        print("FAIL:", name, "" if r is None else
              f"rc {r.returncode}\nstdout {r.stdout[-600:]}\nstderr {r.stderr[-600:]}")


rng = random.Random(0)
# A cycle of 37 ids from all of [0, V): learnable, so the held-out loss (the same cycle) falls.
cycle = [rng.randrange(V) for _ in range(37)] + [V - 1]
train = os.path.join(tmp, "train.bin")
write_token_file(train, [cycle[i % len(cycle)] for i in range(4000)])
held_out = os.path.join(tmp, "val.bin")
write_token_file(held_out, [cycle[(i + 5) % len(cycle)] for i in range(500)])

# --vocab with token files: trains from about ln V (uniform initial predictions), the held-out
# loss before and after, the model named with its V.
saved = os.path.join(tmp, "v300.safetensors")
r = run(["--vocab", str(V), "--data", train, "--eval-data", held_out, "--eval-batches", "2",
         "--ranks", "2", "--batch", "4", "--steps", "6", "--lr", "0.03", "--save", saved])
got = losses(r)
expect("--vocab 300 trains on a token file",
       r.returncode == 0 and len(got) == 6 and all(map(math.isfinite, got))
       and abs(got[0] - math.log(V)) < 0.3 and f"GPT L{L} D{D} H{H} T{T} V{V}:" in r.stdout
       and "held-out loss before" in r.stdout, r)

# The config carries V: --load of the saved checkpoint with --vocab 300, refused with another.
r = run(["--vocab", str(V), "--data", train, "--load", saved, "--steps", "1"])
expect("--load of a V=300 checkpoint with --vocab 300", r.returncode == 0, r)
r = run(["--vocab", "400", "--data", train, "--load", saved, "--steps", "1"])
expect("--load of a V=300 checkpoint with --vocab 400",
       r.returncode == 1 and re.sub(r"rank \d of 2 failed: ", "", r.stderr.strip()) ==
       f"train_gpt: error: --load: {saved} does not match this job: vocab saved 300, now 400 "
       "(a checkpoint of another model)", r)
model_file = os.path.join(tmp, "model.json")
r = run(["--vocab", str(V), "--data", train, "--steps", "0", "--ranks", "1", "--sharding", "none",
         "--export-model", model_file])
shapes = []
if r.returncode == 0:
    def collect(x):
        if isinstance(x, dict):
            if x.get("name") == "weight" and "shape" in x:
                shapes.append(x["shape"])
            for v in x.values():
                collect(v)
        elif isinstance(x, list):
            for v in x:
                collect(v)
    with open(model_file) as f:
        collect(json.load(f))
expect("--export-model with --vocab 300 holds the [300, 16] embedding", [V, D] in shapes, r)

# A token id not below V: one line naming the option, the file, the id, its index and V.
bad = os.path.join(tmp, "bad.bin")
ids = [rng.randrange(V) for _ in range(100)]
ids[37] = V
write_token_file(bad, ids)
for option in ["--data", "--eval-data"]:
    flags = ["--vocab", str(V), "--data", train]
    flags += ["--eval-batches", "1", "--eval-data", bad] if option == "--eval-data" else []
    if option == "--data":
        flags[-1] = bad
    r = run(flags)
    expect(f"{option} with token {V} under --vocab {V}",
           r.returncode == 1 and r.stderr.strip() == f"train_gpt: error: {option}: {bad}: token "
           f"{V} at index 37 is not below the vocabulary size {V}" and "step " not in r.stdout, r)

# --synthetic-tokens: (steps * batch * world + 1) * T + 1 tokens, said; the same seed trains on
# the same tokens (equal losses, digit for digit), another seed on others.
def synthetic(seed, ranks=2):
    return run(["--vocab", "1000", "--synthetic-tokens", "--seed", str(seed), "--ranks",
                str(ranks), "--batch", "2", "--steps", "3"])


a, b, c = synthetic(7), synthetic(7), synthetic(8)
count = 3 * 2 * 2 * T + T + 1
expect("--synthetic-tokens states its count",
       a.returncode == 0 and f"synthetic tokens: {count} uniform ids in [0, 1000) from seed 7\n"
       in a.stdout, a)
expect("--synthetic-tokens: the same seed, the same losses",
       len(losses(a)) == 3 and losses(a) == losses(b), b)
expect("--synthetic-tokens: another seed, other losses",
       len(losses(c)) == 3 and losses(c) != losses(a), c)
expect("--synthetic-tokens starts near ln V", abs(losses(a)[0] - math.log(1000)) < 0.3, a)

# MFU with --peak-tflops on the CPU: the printed percentage is 6N + 6*L*D*T FLOP per token times
# one rank's tokens/s (the printed tokens/s is the job's, over 2 ranks) over the peak.
peak = 0.02
r = run(["--vocab", str(V), "--data", train, "--ranks", "2", "--batch", "4", "--steps", "5",
         "--peak-tflops", str(peak)])
tokens = re.search(r"^tokens/s (\d+) ", r.stdout, re.M)
params = re.search(r"^model: .*: (\d+) parameters; 2 rank", r.stdout, re.M)
mfu = re.search(r"^MFU (\d+\.\d\d)% of 0\.02 TFLOPS \(--peak-tflops\)$", r.stdout, re.M)
ok = r.returncode == 0 and tokens and params and mfu
if ok:
    n = int(params.group(1))
    # GPT-2's layout: embeddings V*D + T*D, per block 12D^2 + 13D, ln_f 2D; the head is tok_emb.
    want_n = V * D + T * D + L * (12 * D * D + 13 * D) + 2 * D
    per_rank = int(tokens.group(1)) / 2
    want = 100 * (6 * n + 6 * L * D * T) * per_rank / (peak * 1e12)
    # The printed tokens/s is rounded to 1, the percentage to 0.01.
    slack = 0.005 + want * 0.5 / int(tokens.group(1)) + 1e-9
    ok = n == want_n and abs(float(mfu.group(1)) - want) <= slack
    if not ok:
        print(f"MFU: N {n} (want {want_n}), printed {mfu.group(1)}%, want {want:.4f}% +- {slack}")
expect("the MFU line's arithmetic", ok, r)
r = run(["--vocab", str(V), "--data", train, "--ranks", "1", "--steps", "2"])
expect("no MFU line on the CPU without --peak-tflops",
       r.returncode == 0 and "MFU" not in r.stdout and "(timed by host clock)" in r.stdout, r)

if failures:
    print(f"{len(failures)} failure(s): {failures}")
    sys.exit(1)
print("ok: --vocab with token files (train, held-out, --load, --export-model), the bad id on "
      "--data and --eval-data, --synthetic-tokens count and determinism, the MFU arithmetic")
