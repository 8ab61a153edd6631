#!/usr/bin/python3
"""tools/export_torch_model.py: exports a model with a shared module and tied weights, which
fsdp-plan then plans; re-exporting the upstream test models reproduces the committed fixtures.
Skipped (exit 77) where torch does not import. Usage: test_export.py FSDP_PLAN SOURCE_ROOT"""
import json
import os
import subprocess
import sys
import tempfile

PLAN, ROOT = sys.argv[1], sys.argv[2]
try:
    import torch
    import torch.nn as nn
except ImportError:
    print("torch is not importable: skipped")
    sys.exit(77)

sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
from export_torch_model import class_bases, export_model, write_model  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


check(class_bases(nn.BatchNorm1d) == ["_BatchNorm", "_NormBase", "Module"], "bases of BatchNorm1d")
check(class_bases(nn.Linear) == ["Module"], "bases of Linear")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        shared = nn.Linear(4, 4)
        self.a = nn.Sequential(shared, nn.ReLU())
        self.b = nn.Sequential(nn.BatchNorm1d(4), shared)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight
        self.emb.weight.requires_grad_(False)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))


net = Net()
doc = export_model(net)
m = doc["module"]
check(doc["format"] == "fsdp-model/1", "format")
check(m["type"] == "Net" and m["bases"] == ["Module"], "root type")
a0 = m["children"][1]["module"]["children"][0]["module"]
b1 = m["children"][2]["module"]["children"][1]["module"]
check("id" in a0 and b1 == {"ref": a0["id"]}, "shared module gets an id and a ref")
emb_w = m["children"][0]["module"]["params"][0]
head_w = m["children"][3]["module"]["params"][0]
check("id" in emb_w and head_w == {"name": "weight", "ref": emb_w["id"]}, "tied weight ref")
check(emb_w["requires_grad"] is False, "requires_grad exported")
check(m["buffers"] == [{"name": "steps", "shape": [], "dtype": "int64"}], "buffer exported")

tmp = tempfile.mkdtemp()
path = os.path.join(tmp, "net.json")
write_model(net, path)
r = subprocess.run([PLAN, path, "--policy", "individually([Sequential])", "--format", "json",
                    "--world-size", "2"], capture_output=True, text=True)
check(r.returncode == 0, f"plan exported model: {r.stderr}")
if r.returncode == 0:
    units = json.loads(r.stdout)["units"]
    check([u["fqn"] for u in units] == ["a", "b", ""], f"units {[u['fqn'] for u in units]}")
    check(units[0]["params"] == ["a.0.weight", "a.0.bias"], "shared Linear managed by 'a'")
    check(units[1]["params"] == ["b.0.weight", "b.0.bias"], "'b' gets only its BatchNorm")
    check(units[2]["params"] == ["emb.weight"], "root: the tied embedding once")

# The command line builds models from an expression.
out = os.path.join(tmp, "t.json")
r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "export_torch_model.py"),
                    "nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1, "
                    "num_decoder_layers=1, dim_feedforward=8)", "-o", out],
                   capture_output=True, text=True)
check(r.returncode == 0, f"exporter CLI: {r.stderr}")
if r.returncode == 0:
    r = subprocess.run([PLAN, out, "--policy", "transformer([TransformerEncoderLayer, "
                        "TransformerDecoderLayer])", "--format", "json"],
                       capture_output=True, text=True)
    check(r.returncode == 0 and [u["fqn"] for u in json.loads(r.stdout)["units"]] ==
          ["encoder.layers.0", "decoder.layers.0", ""], "plan of the CLI export")

# Re-exporting upstream's test models reproduces the committed fixtures.
import gen_plan_fixtures as g  # noqa: E402
for name, build in [("nested_sequential.json", g.nested_sequential),
                    ("batchnorm_net.json", g.BatchNormNet), ("lora_model.json", g.LoraModel),
                    ("transformer_shared_params.json", g.TransformerWithSharedParams)]:
    with open(os.path.join(ROOT, "tests", "fixtures", "models", name)) as f:
        committed = json.load(f)
    check(export_model(build()) == committed, f"re-export of {name} matches the fixture")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("ok")
