"""PyTorch baseline for bench_autowrap: times torch.distributed.fsdp.wrap._recursive_wrap (the
engine behind FSDP's callable auto-wrap policies) on the same meta-device models.

Run with a current PyTorch (/opt/torch2/bin/python) or Debian's python3-torch (1.13):
PYTHON bench_torch_autowrap.py [--json OUT] [--blocks N] [--chains D,D] [--iters N].
Prints one JSON object {case: microseconds_per_module}. Torch 1.13 on Python 3.11 needs a
dataclass workaround to import torch.distributed.fsdp (docs/toolchain.md §6).
"""
import argparse
import copy
import dataclasses
import functools
import json
import sys
import time


def _allow_mutable_dataclass_defaults():
    # torch 1.13's sharded_tensor metadata uses a mutable dataclass default, which Python 3.11
    # rejects; turn such defaults into default_factory copies before importing fsdp.
    original = dataclasses._get_field

    def patched(cls, a_name, a_type, *args, **kwargs):
        default = getattr(cls, a_name, dataclasses.MISSING)
        if isinstance(default, dataclasses.Field):
            value = default.default
            if value is not dataclasses.MISSING and value.__class__.__hash__ is None:
                default.default = dataclasses.MISSING
                default.default_factory = functools.partial(copy.deepcopy, value)
        elif default is not dataclasses.MISSING and default.__class__.__hash__ is None:
            setattr(cls, a_name, dataclasses.field(
                default_factory=functools.partial(copy.deepcopy, default)))
        return original(cls, a_name, a_type, *args, **kwargs)

    dataclasses._get_field = patched


import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

if torch.__version__.startswith("1."):
    _allow_mutable_dataclass_defaults()  # only 1.13 needs it; it breaks torch 2's dataclasses
from torch.distributed.fsdp import wrap as fsdp_wrap  # noqa: E402


class DummyWrapper(nn.Module):
    def __init__(self, module, **kwargs):
        super().__init__()
        self.module = module

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        d = 64
        self.attn = nn.ModuleDict({n: nn.Linear(d, d, device="meta") for n in "qkvo"})
        self.mlp = nn.Sequential(nn.Linear(d, 256, device="meta"), nn.GELU(),
                                 nn.Linear(256, d, device="meta"))
        self.ln1 = nn.LayerNorm(d, device="meta")
        self.ln2 = nn.LayerNorm(d, device="meta")


class Model(nn.Module):
    def __init__(self, blocks):
        super().__init__()
        self.embed = nn.Embedding(1000, 64, device="meta")
        self.blocks = nn.ModuleList([Block() for _ in range(blocks)])
        self.head = nn.Linear(64, 1000, device="meta")


def chain(depth):
    level = None
    for _ in range(depth):
        mods = [nn.Linear(4, 4, device="meta")] + ([level] if level is not None else [])
        level = nn.Sequential(*mods)
    return level


def size_policy(min_num_params):
    return functools.partial(fsdp_wrap.size_based_auto_wrap_policy, min_num_params=min_num_params)


def time_case(build, policy, repeats):
    best = float("inf")
    for _ in range(repeats):
        model = build()
        n = sum(1 for _ in model.modules())
        t0 = time.perf_counter()
        fsdp_wrap._recursive_wrap(model, auto_wrap_policy=policy, wrapper_cls=DummyWrapper,
                                  ignored_modules=set(), ignored_params=set(),
                                  only_wrap_children=True)
        best = min(best, time.perf_counter() - t0)
    return best * 1e6 / n


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    parser.add_argument("--blocks", type=int, default=4000)
    parser.add_argument("--chains", default="400,800,1600", help="depths; '' for none")
    parser.add_argument("--iters", type=int, default=7, help="best of this many, block models")
    args = parser.parse_args()
    sys.setrecursionlimit(100000)
    results = {
        "blocks_size_based": time_case(lambda: Model(args.blocks), size_policy(20000),
                                       args.iters),
        "blocks_transformer": time_case(
            lambda: Model(args.blocks),
            functools.partial(fsdp_wrap.transformer_auto_wrap_policy,
                              transformer_layer_cls={Block}),
            args.iters),
    }
    for depth in [int(d) for d in args.chains.split(",") if d]:
        results[f"chain_{depth}"] = time_case(lambda: chain(depth), size_policy(int(1e9)), 1)
    results["torch_version"] = torch.__version__
    results["modules_per_block_model"] = sum(1 for _ in Model(args.blocks).modules())
    out = json.dumps(results)
    if args.json:
        with open(args.json, "w") as f:
            f.write(out)
    print(out)


if __name__ == "__main__":
    main()
