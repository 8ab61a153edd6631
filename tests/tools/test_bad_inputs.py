#!/usr/bin/env python3
"""fsdp-plan's bad inputs as a table (issue 12): each row is a command line (model file, policy,
option) and the exit status and message it must give; the error contract is one line on stderr
starting with 'fsdp-plan: error:', nothing on stdout. Usage: test_bad_inputs.py FSDP_PLAN"""
import os
import subprocess
import sys
import tempfile
import json

PLAN = sys.argv[1]
tmp = tempfile.mkdtemp()
failures = []


def model_file(name, module):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write('{"format": "fsdp-model/1", "module": ' + module + "}")
    return path


def params(*specs):
    """A root module 'A' with parameters given as (name, shape, dtype)."""
    ps = ", ".join('{"name": "%s", "shape": %s, "dtype": "%s"}' % s for s in specs)
    return '{"type": "A", "params": [' + ps + "]}"


DEEP = 100000
INT64_MAX = 2**63 - 1
small = model_file("small.json", params(("w", "[10]", "float32")))
big = model_file("big.json", params(("w", "[%d]" % 2**62, "float32")))
two_max = model_file("two_max.json", params(("w", "[%d]" % INT64_MAX, "uint8"),
                                            ("v", "[%d]" % INT64_MAX, "uint8")))
max_u8 = model_file("max_u8.json", params(("w", "[%d]" % INT64_MAX, "uint8")))
deep_type = model_file("deep_type.json", '{"type": ' + "[" * DEEP + "]" * DEEP + "}")
deep_shape = model_file("deep_shape.json", '{"type": "A", "params": [{"name": "w", "shape": ' +
                        "[" * DEEP + "]" * DEEP + "}]}")
deep_name = model_file("deep_name.json", '{"type": "A", "params": [{"name": ' +
                       "{\"a\":" * DEEP + "1" + "}" * DEEP + ', "shape": [1]}]}')
with open(os.path.join(tmp, "deep_format.json"), "w") as f:
    f.write('{"format": ' + "[" * DEEP + "]" * DEEP + ', "module": {"type": "A"}}')
huge_number = model_file("huge_number.json",
                         '{"type": "A",\n "params": [{"name": "w", "shape": [1e400]}]}')
deep_policy = "or(" * 30000 + "always" + ")" * 30000

# (arguments, exit status, text the one stderr line must contain)
TABLE = [
    # arithmetic (defect 2)
    ([big], 1, "the model's parameter bytes does not fit in 64 bits (4611686018427387904 * 4)"),
    ([two_max], 1, "the model's numel does not fit in 64 bits"),
    ([max_u8, "--world-size", "2", "--sharding", "NO_SHARD"], 0, ""),
    ([max_u8, "--world-size", "2"], 1, "unit '' (A): flat parameter layout"),
    ([small, "--world-size", "9223372036854775808"], 2,
     "--world-size: expected an integer from 1 to 2147483647, got '9223372036854775808'"),
    ([small, "--world-size", "2147483648"], 2, "expected an integer from 1 to 2147483647"),
    ([small, "--world-size", "0"], 2, "--world-size: expected an integer from 1 to 2147483647, "
                                      "got '0'"),
    ([small, "--world-size", "-3"], 2, "--world-size"),
    ([small, "--world-size", "4x"], 2, "got '4x'"),
    ([small, "--node-size", "0"], 2, "--node-size: expected an integer from 1 to 2147483647"),
    ([small, "--sharding", "HYBRID_SHARD", "--world-size", "12", "--node-size", "8"], 1,
     "--node-size 8 does not divide --world-size 12"),
    ([small, "--sharding", "HYBRID_SHARD", "--world-size", "4", "--node-size", "8"], 1,
     "--node-size 8 does not divide --world-size 4: HYBRID_SHARD shards within whole nodes"),
    ([small, "--sharding", "HYBRID_SHARD", "--world-size", "16", "--node-size", "8"], 0, ""),
    # deeply nested JSON (defect 3)
    ([deep_type], 1, "deep_type.json: at module.type: expected a string, got [[[[...]]]]"),
    ([deep_shape], 1, "at module.params[0].shape: shape must be a list of non-negative "
                      "integers, got [[[[...]]]]"),
    ([deep_name], 1, "at module.params[0].name: expected a string, got {\"a\":{\"a\":{\"a\":"),
    ([os.path.join(tmp, "deep_format.json")], 1, "unknown format version [[[[...]]]]"),
    # policy expressions (defect 4)
    ([small, "--policy", deep_policy], 1, "column 304: policies nested more than 100 deep"),
    ([small, "--policy", "or(" * 100 + "always" + ")" * 100], 0, ""),
    # the error contract (defect 7)
    # A directory is a Hugging Face model directory (tests/tools/test_plan_config.py).
    ([tmp], 1, tmp + ": a directory without config.json"),
    ([huge_number], 1, "huge_number.json:2:37: number overflow parsing '1e400'"),
    ([os.path.join(tmp, "missing.json")], 1, "cannot open the model file: No such file"),
    # a place is named once (an input error inside a buffer is not wrapped again)
    ([model_file("buf.json", '{"type": "A", "buffers": [{"name": "b", "shape": [1e3]}]}')], 1,
     "error: " + os.path.join(tmp, "buf.json") + ": at module.buffers[0].shape: shape must be a "
     "list of non-negative integers, got [1000.0]"),
]


def check(args, code, needle, stdout_to=None):
    shown = [a if len(a) < 80 else a[:40] + "..." for a in args]
    r = subprocess.run([PLAN, *args], stdout=stdout_to or subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    what = f"{shown}: rc={r.returncode} stderr={r.stderr[:300]!r}"
    ok = r.returncode == code
    if code != 0:
        lines = r.stderr.splitlines()
        ok = ok and len(lines) == 1 and lines[0].startswith("fsdp-plan: error: ")
        ok = ok and needle in lines[0] and not r.stdout
    if not ok:
        failures.append(what)
        print("FAIL:", what, "expected", code, repr(needle))


for args, code, needle in TABLE:
    check(args, code, needle)

# A full disk: the write error is said, not swallowed.
if os.path.exists("/dev/full"):
    with open("/dev/full", "w") as full:
        check([small, "--format", "json"], 1,
              "writing the json output to standard output: No space left on device",
              stdout_to=full)

# A pipe (a FIFO) is read like a file.
fifo = os.path.join(tmp, "fifo")
os.mkfifo(fifo)
writer = subprocess.Popen(["sh", "-c", f"cat {small} > {fifo}"])
r = subprocess.run([PLAN, fifo, "--format", "json"], capture_output=True, text=True, timeout=60)
writer.wait()
if r.returncode != 0 or '"numel": 10' not in r.stdout:
    failures.append(f"fifo: rc={r.returncode} {r.stderr!r}")
    print("FAIL: fifo", r.returncode, r.stderr)

# dot output escapes child names (quotes, backslashes, line breaks).
odd = model_file("odd.json", '{"type": "A", "children": [{"name": "a\\"b\\\\c\\nd", "module": '
                             '{"type": "B"}}]}')
r = subprocess.run([PLAN, odd, "--format", "dot"], capture_output=True, text=True, timeout=60)
if r.returncode != 0 or 'label="a\\"b\\\\c\\nd\\nB"' not in r.stdout:
    failures.append(f"dot escape: {r.stdout!r} {r.stderr!r}")
    print("FAIL: dot escape", r.stdout)

# A 100 000-deep chain (defect 5): table and dot output stay linear in the number of modules
# (tree lines are drawn 48 levels deep, then the depth is written), and the chain is complete.
chain = model_file("chain.json", '{"type": "L", "params": [{"name": "w", "shape": [2]}], '
                   '"children": [{"name": "c", "module": ' * DEEP + '{"type": "L"}' +
                   "}]}" * DEEP)
for fmt, per_module in (("table", 200), ("dot", 100)):
    r = subprocess.run([PLAN, chain, "--format", fmt], capture_output=True, text=True,
                       timeout=300)
    lines = r.stdout.count("\n")
    if r.returncode != 0 or len(r.stdout) > per_module * DEEP or lines < DEEP:
        failures.append(f"deep chain {fmt}: rc={r.returncode} {len(r.stdout)} bytes {lines} lines")
        print("FAIL: deep chain", fmt, r.returncode, len(r.stdout), r.stderr[:200])
    if fmt == "table" and "┄ [depth 100000] └─ c (L)" not in r.stdout:
        failures.append("deep chain table: the deepest module's line")
        print("FAIL: deep chain table line")


def chain_file(name, depth):
    """A chain `depth` modules deep below the root, each level an L with a 2-element parameter."""
    return model_file(name, '{"type": "L", "params": [{"name": "w", "shape": [2]}], '
                      '"children": [{"name": "c", "module": ' * depth + '{"type": "L"}' +
                      "}]}" * depth)


# --policy always on a 200 000-deep chain (defect 5): every module is a unit, and unit FQNs are
# spelled only where printed (the table keeps their last 27 characters), so the run is linear in
# the chain, not quadratic (it ran out of memory before).
DEEPER = 200000
r = subprocess.run([PLAN, chain_file("chain200k.json", DEEPER), "--policy", "always"],
                   capture_output=True, text=True, timeout=300)
deepest_row = "   0  …" + "c." * 13 + "c L "
if r.returncode != 0 or r.stdout.count("=> unit #") != DEEPER + 1 or deepest_row not in r.stdout:
    failures.append(f"always on a {DEEPER}-deep chain: rc={r.returncode} {r.stderr[:200]!r}")
    print("FAIL: always on a deep chain", r.returncode, r.stderr[:200])

# JSON spells every FQN in full: its size is the sum of their lengths (quadratic in a chain's
# depth), and it is written as it is made. A 5 000-deep chain: 5 000 parameters in the root unit
# (25 MB of FQNs); under `always`, one unit per module with its full FQN.
SOME = 5000
chain5k = chain_file("chain5k.json", SOME)
for policy, check in (
        ([], lambda d: len(d["units"]) == 1 and len(d["units"][0]["params"]) == SOME and
         d["units"][0]["params"][-1] == "c." * (SOME - 1) + "w"),
        (["--policy", "always"], lambda d: len(d["units"]) == SOME + 1 and
         d["units"][0]["fqn"] == ".".join(["c"] * SOME) and
         d["units"][1]["params"] == ["c." * (SOME - 1) + "w"] and
         d["units"][SOME]["fqn"] == "")):
    r = subprocess.run([PLAN, chain5k, "--format", "json"] + policy, capture_output=True,
                       text=True, timeout=300)
    ok = r.returncode == 0
    if ok:
        ok = check(json.loads(r.stdout))
    if not ok:
        failures.append(f"json of a {SOME}-deep chain {policy}: rc={r.returncode}")
        print("FAIL: json of a deep chain", policy, r.returncode, r.stderr[:200])

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print(f"ok: {len(TABLE) + 8} bad inputs")
