#!/usr/bin/env python3
"""fsdp-plan's command line: output formats, warnings, and every error of the issue (non-zero
exit, one line on stderr, nothing on stdout). Usage: test_cli.py FSDP_PLAN SOURCE_ROOT"""
import json
import os
import subprocess
import sys
import tempfile

PLAN, ROOT = sys.argv[1], sys.argv[2]
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")
failures = []


def run(*args):
    return subprocess.run([PLAN, *args], capture_output=True, text=True)


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def model(name):
    return os.path.join(MODELS, name)


def expect_error(args, needle, code=1):
    r = run(*args)
    lines = r.stderr.splitlines()
    what = f"{args}: rc={r.returncode} stdout={r.stdout[:80]!r} stderr={r.stderr!r}"
    check(r.returncode == code, "exit code " + what)
    check(r.stdout == "", "stdout empty " + what)
    check(len(lines) == 1, "one stderr line " + what)
    check(needle in r.stderr, f"message contains {needle!r}: " + what)


tmp = tempfile.mkdtemp()


def write(name, text):
    p = os.path.join(tmp, name)
    with open(p, "w") as f:
        f.write(text)
    return p


# --- outputs ----------------------------------------------------------------------------------
r = run(model("nested_sequential.json"), "--policy", "size(min_num_params=40)", "--format",
        "json", "--world-size", "4")
check(r.returncode == 0, f"json rc {r.stderr}")
j = json.loads(r.stdout)
check([u["fqn"] for u in j["units"]] == ["2", ""], "json units")
check(j["units"][0]["params"] == ["2.0.weight", "2.0.bias", "2.1.weight", "2.1.bias"],
      "json params")
check(j["units"][0]["numel"] == 60 and j["units"][0]["shard_numel"] == 15, "json numel")
for key in ("config", "model", "units", "per_rank", "per_step", "warnings"):
    check(key in j, f"json has {key}")
check(r.stderr == "", "json: nothing on stderr")

r = run(model("modulelist_2x_linear5.json"), "--policy", "size(min_num_params=40)",
        "--format", "json")
check(any("containers that do not implement forward" in w for w in json.loads(r.stdout)["warnings"]),
      "container warning in json")
r = run(model("modulelist_2x_linear5.json"), "--policy", "size(min_num_params=40)",
        "--world-size", "2")
check(r.returncode == 0 and "module tree" in r.stdout, "table output")
check("fsdp-plan: warning: FSDP will not all-gather parameters for containers" in r.stderr,
      "table warnings on stderr")

r = run(model("nested_sequential.json"), "--policy", "always", "--format", "dot")
check(r.returncode == 0 and r.stdout.startswith("digraph") and "cluster_unit5" in r.stdout,
      "dot output")

r = run(model("batchnorm_net.json"), "--policy", "size(min_num_params=1e8)", "--mixed-precision",
        "--world-size", "8", "--format", "json")
j = json.loads(r.stdout)
check([u["fqn"] for u in j["units"]] == ["bn1", "bn2", "bn3", "sync_bn", ""], "mp units")
check(any("instacnes" in w for w in j["warnings"]), "mp override warning (upstream text)")

r = run(model("lora_model.json"), "--policy", "modules([LoraAttention, LoraMLP, LoraDecoder])",
        "--use-orig-params", "--format", "json")
check(r.returncode == 0, "lora with use_orig_params succeeds")
check(any("We do not recommend wrapping such modules" in w for w in json.loads(r.stdout)["warnings"]),
      "lora warning")

r = run(model("nested_sequential.json"), "--policy", "always", "--ignore", "1", "--ignore", "2.0",
        "--format", "json")
check([u["fqn"] for u in json.loads(r.stdout)["units"]] == ["0", "2.1", "2", ""],
      "repeated --ignore")

r = run(model("transformer_shared_params.json"), "--policy", "transformer([TransformerEncoderLayr])",
        "--format", "json")
check(any("did you mean 'TransformerEncoderLayer'" in w for w in json.loads(r.stdout)["warnings"]),
      "policy class typo warning")

for s in ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"):
    r = run(model("gpt2_small.json"), "--policy", "transformer([GPT2Block])", "--sharding", s,
            "--world-size", "16", "--format", "json")
    check(r.returncode == 0 and json.loads(r.stdout)["config"]["sharding"] == s, f"sharding {s}")

# --- errors -----------------------------------------------------------------------------------
expect_error([os.path.join(tmp, "missing.json")], "cannot open the model file")
expect_error([write("bad.json", '{"format": "fsdp-model/1",\n "module": {"type": "A",,}}')],
             "bad.json:2:25: malformed JSON")
expect_error([write("v2.json", '{"format": "fsdp-model/2", "module": {"type": "A"}}')],
             "unknown format version \"fsdp-model/2\"")
expect_error([write("ref.json", '{"format": "fsdp-model/1", "module": {"type": "A", "children":'
                                ' [{"name": "x", "module": {"ref": "m4"}}]}}')],
             "ref \"m4\" names no module")
expect_error([write("neg.json", '{"format": "fsdp-model/1", "module": {"type": "A", "params":'
                                ' [{"name": "w", "shape": [2, -3]}]}}')],
             "shape must be a list of non-negative integers, got [2,-3]")
expect_error([write("flt.json", '{"format": "fsdp-model/1", "module": {"type": "A", "params":'
                                ' [{"name": "w", "shape": [2.5]}]}}')],
             "shape must be a list of non-negative integers")
expect_error([model("nested_sequential.json"), "--policy", "sise(min_num_params=40)"],
             "column 1: unknown policy 'sise' (did you mean 'size'?)")
expect_error([model("nested_sequential.json"), "--policy", "size(min_num_param=40)"],
             "did you mean 'min_num_params'?")
expect_error([model("nested_sequential.json"), "--policy", "size(min_num_params=4.5)"],
             "column 21: min_num_params must be a non-negative integer")
expect_error([model("nested_sequential.json"), "--ignore", "2.5"],
             "--ignore '2.5': the model has no module at that path (did you mean")
expect_error([model("lora_model.json"), "--policy", "modules([LoraAttention, LoraMLP, LoraDecoder])"],
             "layers.0.attn has both parameters with requires_grad=True and False. FSDP does not "
             "support wrapping such modules when use_orig_params=False.")
expect_error([model("nested_sequential.json"), "--sharding", "FULL"],
             "fsdp-plan: error: --sharding: unknown strategy 'FULL'; choose FULL_SHARD, "
             "SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or _HYBRID_SHARD_ZERO2\n")
expect_error([model("nested_sequential.json"), "--sharding", "FUL_SHARD"],
             "--sharding: unknown strategy 'FUL_SHARD' (did you mean 'FULL_SHARD' or 'NO_SHARD'?); "
             "choose FULL_SHARD")
expect_error([model("nested_sequential.json"), "--format", "xml"], "--format", code=2)
expect_error([model("nested_sequential.json"), "--world-size", "0"], "--world-size", code=2)
expect_error([], "MODEL is required", code=2)

# --- activations: --batch and --seq ------------------------------------------------------------
r = run(model("gpt2_small.json"), "--policy", "transformer([GPT2Block])", "--batch", "2",
        "--seq", "128", "--format", "json")
check(r.returncode == 0, f"activations rc {r.stderr}")
if r.returncode == 0:
    pr = json.loads(r.stdout)["per_rank"]
    check(pr["activation_bytes"] > 0 and
          pr["peak_with_activations_bytes"] >= pr["peak_bytes"] + 0, "activation bytes")
    check(pr["activations"]["batch"] == 2 and pr["activations"]["seq"] == 128, "batch and seq")
r = run(model("gpt2_small.json"), "--batch", "2", "--seq", "128")
check(r.returncode == 0 and "peak total incl. activations" in r.stdout, "activations table")
expect_error([model("gpt2_small.json"), "--batch", "2"], "--batch and --seq go together")
expect_error([model("gpt2_small.json"), "--batch", "0", "--seq", "4"], "--batch: Value 0 not in range", 2)

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("ok")
