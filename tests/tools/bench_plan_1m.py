#!/usr/bin/env python3
"""Times fsdp-plan on a generated model of about 1 000 000 modules (100 stages of 715
transformer-like blocks of 14 modules each; ~70M parameters). The file (~100 MB) is written to a temporary
directory and removed afterwards. Usage: bench_plan_1m.py FSDP_PLAN [BLOCKS_PER_STAGE [POLICY...]]
Registered as a meson benchmark: meson test -C BUILD --benchmark --suite tools"""
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

PLAN = sys.argv[1]
STAGES = 100
PER_STAGE = int(sys.argv[2]) if len(sys.argv) > 2 else 715
D = 32


def linear(i, o):
    return {"type": "Linear", "params": [{"name": "weight", "shape": [o, i]},
                                         {"name": "bias", "shape": [o]}]}


def norm():
    return {"type": "LayerNorm", "params": [{"name": "weight", "shape": [D]},
                                            {"name": "bias", "shape": [D]}]}


def child(name, module):
    return {"name": name, "module": module}


def block():
    attn = {"type": "Attention", "children": [child(n, linear(D, D)) for n in "qkvo"] +
            [child("drop", {"type": "Dropout"})]}
    mlp = {"type": "MLP", "children": [child("fc1", linear(D, 4 * D)), child("act", {"type": "GELU"}),
                                       child("fc2", linear(4 * D, D)),
                                       child("drop", {"type": "Dropout"})]}
    return {"type": "Block", "children": [child("ln1", norm()), child("attn", attn),
                                          child("ln2", norm()), child("mlp", mlp)]}


def main():
    # One block serialised once and repeated textually: the generator stays fast.
    one = json.dumps(block(), separators=(",", ":"))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "big.json")
        with open(path, "w") as f:
            f.write('{"format":"fsdp-model/1","module":{"type":"Model","children":['
                    '{"name":"embed","module":{"type":"Embedding","params":[{"name":"weight",'
                    f'"shape":[50000,{D}]}}]}}}},'
                    '{"name":"layers","module":{"type":"ModuleList","children":[')
            stage = ('{"type":"ModuleList","children":[' +
                     ",".join(f'{{"name":"{i}","module":{one}}}' for i in range(PER_STAGE)) + "]}")
            f.write(",".join(f'{{"name":"{s}","module":{stage}}}' for s in range(STAGES)))
            f.write("]}}]}}\n")
        size = os.path.getsize(path)
        modules = 3 + STAGES * (1 + 14 * PER_STAGE)
        print(f"model: {modules} modules, {size / 1e6:.0f} MB")
        policies = sys.argv[3:] or ["", "transformer([Block])", "size(min_num_params=100000)",
                                    "always"]
        for policy in policies:
            policy = "" if policy == "none" else policy
            args = [PLAN, path, "--format", "json", "--world-size", "64"]
            if policy:
                args += ["--policy", policy]
            t = time.time()
            ru = resource.getrusage(resource.RUSAGE_CHILDREN)
            r = subprocess.run(args, capture_output=True, text=True)
            dt = time.time() - t
            ru2 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = ru2.ru_utime + ru2.ru_stime - ru.ru_utime - ru.ru_stime
            if r.returncode != 0:
                print(r.stderr)
                return 1
            units = len(json.loads(r.stdout)["units"])
            print(f"  --policy {policy or '(none)':<30} {units:>8} units  {dt:6.2f} s wall"
                  f"  {cpu:6.2f} s cpu")
    return 0


if __name__ == "__main__":
    sys.exit(main())
