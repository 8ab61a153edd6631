#!/usr/bin/env python3
"""Regenerates tests/fixtures/gpt/ for tests/examples/test_gpt.cpp, with train_gpt_ref.py:
init.safetensors (GPT-2 init of the tiny config, torch seed 0) and losses.json (PyTorch's
per-step losses for 8 steps of SGD and of AdamW at global batch 4 on data.txt, the first 4 KiB
of /usr/share/common-licenses/Apache-2.0).

    /usr/bin/python3 tools/torch_reference/gen_gpt_fixtures.py
"""
import json
import os
import re
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "tests", "fixtures", "gpt")
SCRIPT = os.path.join(HERE, "train_gpt_ref.py")
CONFIG = {"layers": 2, "d_model": 32, "heads": 4, "seq": 16}
BATCH, STEPS = 4, 8
RUNS = {"sgd": 0.1, "adamw": 3e-3}  # optimizer -> lr


def run(*args):
    flags = ["--layers", str(CONFIG["layers"]), "--d-model", str(CONFIG["d_model"]),
             "--heads", str(CONFIG["heads"]), "--seq", str(CONFIG["seq"])]
    return subprocess.run([sys.executable, SCRIPT] + flags + list(args), check=True,
                          capture_output=True, text=True).stdout


def main():
    init = os.path.join(OUT, "init.safetensors")
    run("--seed", "0", "--save-init", init)
    result = {"generator": "tools/torch_reference/gen_gpt_fixtures.py",
              "torch_version": torch.__version__, "config": CONFIG, "batch": BATCH,
              "steps": STEPS, "data": "data.txt", "init": "init.safetensors", "runs": {}}
    for optimizer, lr in RUNS.items():
        out = run("--batch", str(BATCH), "--steps", str(STEPS), "--lr", repr(lr),
                  "--optimizer", optimizer, "--data", os.path.join(OUT, "data.txt"),
                  "--load", init)
        losses = [float(x) for x in re.findall(r"^step \d+ loss (\S+)$", out, re.M)]
        assert len(losses) == STEPS, out
        result["runs"][optimizer] = {"lr": lr, "losses": losses}
        print(optimizer, losses)
    with open(os.path.join(OUT, "losses.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
