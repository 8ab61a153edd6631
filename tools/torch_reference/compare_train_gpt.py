#!/usr/bin/env python3
"""Runs build/examples/train_gpt and PyTorch's reference (train_gpt_ref.py) from the same initial
weights on the same data, and compares their per-step losses (relative tolerance, default 1e-5).

    /usr/bin/python3 tools/torch_reference/compare_train_gpt.py --world 2 --batch 4 \
        --steps 8 --optimizer adamw --lr 3e-3 --data tests/fixtures/gpt/data.txt \
        -- --sharding FULL_SHARD --use-orig-params
    # under MPI: --prefix "mpirun -np 2 --oversubscribe" -- --backend mpi

--batch is per rank: the reference trains the global batch world x batch in one process.
--init torch (default) starts both from torch's GPT-2 init (train_gpt_ref.py --save-init);
--init cpp from train_gpt's own (--steps 0 --save), which also checks that PyTorch reads
train_gpt's checkpoints. Arguments after `--` go to train_gpt only. Exit status 1 on mismatch.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
STEP_LINE = re.compile(r"^step (\d+) loss (\S+)", re.M)


def losses(text):
    return {int(s): float(x) for s, x in STEP_LINE.findall(text)}


def run(cmd):
    print("+", " ".join(shlex.quote(c) for c in cmd), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit("failed (%d): %s\n%s%s" % (done.returncode, cmd[0], done.stdout, done.stderr))
    return done.stdout


def main():
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train-gpt", default=os.path.join(ROOT, "build", "examples", "train_gpt"))
    ap.add_argument("--prefix", default="", help="launcher, e.g. 'mpirun -np 2 --oversubscribe'")
    ap.add_argument("--world", type=int, default=1,
                    help="ranks (passed as --ranks unless --prefix)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=32)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--batch", type=int, default=4, help="per rank")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--optimizer", choices=["sgd", "adamw"], default="adamw")
    ap.add_argument("--data", default=os.path.join(ROOT, "tests", "fixtures", "gpt", "data.txt"))
    ap.add_argument("--init", choices=["torch", "cpp"], default="torch")
    ap.add_argument("--rtol", type=float, default=1e-5)
    a = ap.parse_args(argv)

    model = ["--layers", str(a.layers), "--d-model", str(a.d_model), "--heads", str(a.heads),
             "--seq", str(a.seq)]
    train = ["--steps", str(a.steps), "--lr", repr(a.lr), "--optimizer", a.optimizer,
             "--data", a.data]
    ours = shlex.split(a.prefix) + [a.train_gpt] + model
    if not a.prefix:
        ours += ["--ranks", str(a.world)]
    ref = [sys.executable, os.path.join(HERE, "train_gpt_ref.py")] + model
    with tempfile.TemporaryDirectory() as tmp:
        init = os.path.join(tmp, "init.safetensors")
        if a.init == "torch":
            run(ref + ["--save-init", init])
        else:
            run(ours + ["--batch", str(a.batch), "--steps", "0", "--data", a.data,
                        "--save", init] + extra)
        want = losses(run(ref + train + ["--batch", str(a.world * a.batch), "--load", init]))
        got = losses(run(ours + train + ["--batch", str(a.batch), "--load", init] + extra))
    bad = 0
    print("step  train_gpt       PyTorch         rel.diff")
    for step in sorted(want):
        g = got.get(step)
        diff = abs(g - want[step]) / abs(want[step]) if g is not None else float("inf")
        flag = "" if diff <= a.rtol else "  MISMATCH"
        bad += bool(flag)
        print("%4d  %-14s  %-14.8g  %.2e%s" % (step, "missing" if g is None else "%.8g" % g,
                                              want[step], diff, flag))
    print("%d of %d steps within rtol %g" % (len(want) - bad, len(want), a.rtol))
    sys.exit(1 if bad or not want else 0)


if __name__ == "__main__":
    main()
