#!/usr/bin/env python3
"""train_lm's command line (issue 12, defect 6) as a table: each bad flag ends with exit status 2
(1 for a bad text file) and one line on stderr 'train_lm: error: ...' naming the flag, before any
training. Usage: test_train_lm_flags.py TRAIN_LM"""
import os
import subprocess
import sys
import tempfile

EXE = sys.argv[1]
tmp = tempfile.mkdtemp()
text = os.path.join(tmp, "text.txt")
with open(text, "w") as f:
    f.write("the quick brown fox jumps over the lazy dog. " * 200)
short = os.path.join(tmp, "short.txt")
with open(short, "w") as f:
    f.write("too short")
tiny = ["--text", text, "--d-model", "8", "--heads", "2", "--layers", "1", "--context", "8",
        "--batch", "2"]
RANGE = "expected an integer from 1 to"

TABLE = [
    (["--log-every", "0"], 2, "--log-every: " + RANGE + " 100000000, got '0'"),
    (["--steps", "0"], 2, "--steps: " + RANGE + " 100000000, got '0'"),
    (["--steps", "-4"], 2, "--steps: " + RANGE),
    (["--batch", "0"], 2, "--batch: " + RANGE + " 65536, got '0'"),
    (["--batch", "9223372036854775808"], 2, "--batch: " + RANGE),
    (["--lr", "inf"], 2, "--lr: expected a finite number above 0, got 'inf'"),
    (["--lr", "nan"], 2, "--lr: expected a finite number above 0, got 'nan'"),
    (["--lr", "-0.1"], 2, "--lr: expected a finite number above 0, got '-0.1'"),
    (["--layers", "-1"], 2, "--layers: " + RANGE + " 1024, got '-1'"),
    (["--layers", "0"], 2, "--layers: " + RANGE + " 1024, got '0'"),
    (["--d-model", "-5"], 2, "--d-model: " + RANGE),
    (["--heads", "0"], 2, "--heads: " + RANGE),
    (["--context", "0"], 2, "--context: " + RANGE),
    (["--d-model", "10", "--heads", "3"], 2, "--d-model 10 is not a multiple of --heads 3"),
    (["--steps", "x"], 2, "--steps: " + RANGE + " 100000000, got 'x'"),
    (["--text", os.path.join(tmp, "missing.txt")], 1, "missing.txt"),
    (["--text", short], 1, "is too short for --context 64"),
]

failures = []
for args, code, needle in TABLE:
    r = subprocess.run([EXE, *args], capture_output=True, text=True, timeout=120)
    lines = r.stderr.splitlines()
    ok = (r.returncode == code and len(lines) == 1 and lines[0].startswith("train_lm: error: ")
          and needle in lines[0])
    if not ok:
        failures.append(args)
        print("FAIL:", args, "rc", r.returncode, "stderr", r.stderr[:300], "want", code, needle)

# The smallest valid run, logging every step: it trains (exit 0) or says why it failed.
r = subprocess.run([EXE, *tiny, "--steps", "2", "--log-every", "1"], capture_output=True,
                   text=True, timeout=300)
logged = [l for l in r.stdout.splitlines() if l.startswith("step ")]
if len(logged) != 2 or r.returncode not in (0, 1) or (
        r.returncode == 1 and "train_lm: error: the held-out loss did not fall" not in r.stderr):
    failures.append("tiny run")
    print("FAIL: tiny run", r.returncode, r.stdout[-300:], r.stderr[-300:])

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print(f"ok: {len(TABLE) + 1} command lines")
