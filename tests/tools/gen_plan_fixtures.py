#!/usr/bin/python3
"""Writes the planner's fixtures (tests/fixtures/models/), with Debian's torch 1.13:

* model files, exported with tools/export_torch_model.py, of the models of upstream's
  test_wrap.py (NestedSequential, the preset exclude/force-leaf cases, TransformerWithSharedParams
  with its tied output_proj, BatchNormNet, LoraModel), GPT-2 small and medium built from torch.nn
  layers (the README's worked example), and small random models;
* torch_expected.json: the FSDP units PyTorch's own `_recursive_wrap` gives for callable policies
  on those models (the planner must produce exactly these units and parameter lists).

Run: /usr/bin/python3 tests/tools/gen_plan_fixtures.py
"""
import dataclasses
import functools
import json
import os
import random
import sys

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(ROOT, "tests", "fixtures", "models")
sys.path.insert(0, os.path.join(ROOT, "tools"))
from export_torch_model import export_model  # noqa: E402


def import_wrap():
    """torch 1.13's fsdp on Python 3.11 trips over a dataclass mutable default; turn such
    defaults into default_factory before importing (docs/toolchain.md section 6)."""
    import copy

    orig = dataclasses._get_field

    def patched(cls, a_name, a_type, *rest):
        try:
            return orig(cls, a_name, a_type, *rest)
        except ValueError as e:
            if "mutable default" not in str(e):
                raise
            value = cls.__dict__.get(a_name, dataclasses.MISSING)
            default = value.default if isinstance(value, dataclasses.Field) else value
            setattr(cls, a_name,
                    dataclasses.field(default_factory=lambda d=default: copy.deepcopy(d)))
            return orig(cls, a_name, a_type, *rest)

    dataclasses._get_field = patched
    try:
        import torch.distributed.fsdp.wrap as wrap
    finally:
        dataclasses._get_field = orig
    return wrap


# --- upstream test_wrap.py models ------------------------------------------------------------

def nested_sequential():
    return nn.Sequential(nn.Linear(5, 5), nn.Linear(5, 5),
                         nn.Sequential(nn.Linear(5, 5), nn.Linear(5, 5)))


class BatchNormNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(10, 10, bias=False)
        self.bn1 = nn.BatchNorm1d(10)
        self.bn2 = nn.BatchNorm2d(10)
        self.bn3 = nn.BatchNorm3d(10)
        self.sync_bn = nn.SyncBatchNorm(10)


class LoraAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = nn.Linear(32, 32, bias=False)
        self.lora_A = nn.Linear(32, 8, bias=False)
        self.lora_B = nn.Linear(8, 32, bias=False)
        self.k_proj = nn.Linear(32, 32, bias=False)
        self.v_proj = nn.Linear(32, 32, bias=False)
        self.o_proj = nn.Linear(32, 32, bias=False)


class LoraMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj1 = nn.Linear(32, 128, bias=False)
        self.proj2 = nn.Linear(128, 32, bias=False)


class LoraDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = LoraAttention()
        self.mlp = LoraMLP()
        self.inp_layernorm = nn.LayerNorm(32)
        self.post_attn_layernorm = nn.LayerNorm(32)


class LoraModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(100, 32)
        self.layers = nn.ModuleList([LoraDecoder() for _ in range(4)])
        self.norm = nn.LayerNorm(32)
        self.embed_tokens.weight.requires_grad_(False)
        self.norm.weight.requires_grad_(False)
        self.norm.bias.requires_grad_(False)
        for layer in self.layers:
            layer.inp_layernorm.weight.requires_grad_(False)
            layer.inp_layernorm.bias.requires_grad_(False)
            layer.post_attn_layernorm.weight.requires_grad_(False)
            layer.post_attn_layernorm.bias.requires_grad_(False)
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                getattr(layer.attn, name).weight.requires_grad_(False)
            layer.mlp.proj1.weight.requires_grad_(False)
            layer.mlp.proj2.weight.requires_grad_(False)


class TransformerWithSharedParams(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(23, 16)
        self.transformer = nn.Transformer(d_model=16, num_encoder_layers=2, num_decoder_layers=2,
                                          dim_feedforward=8, dropout=0.1)
        self.output_proj = nn.Linear(16, 23)
        self.output_proj.weight = self.embed_tokens.weight
        self.register_buffer("vocab_bias", self.embed_tokens.weight.new_ones((16,)))
        self.register_buffer("long_buffer", torch.zeros_like(self.vocab_bias, dtype=torch.long))
        self.bs = 2
        self.bn = nn.BatchNorm1d(2)


# --- GPT-2 from torch.nn layers, with Hugging Face's module names and shapes ----------------

class Conv1D(nn.Module):
    """HF's Conv1D: a Linear with a transposed weight (nx, nf)."""

    def __init__(self, nf, nx):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))


class NewGELUActivation(nn.Module):
    pass


class GPT2Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_attn = Conv1D(3 * d, d)
        self.c_proj = Conv1D(d, d)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)


class GPT2MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = Conv1D(4 * d, d)
        self.c_proj = Conv1D(d, 4 * d)
        self.act = NewGELUActivation()
        self.dropout = nn.Dropout(0.1)


class GPT2Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = GPT2Attention(d)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = GPT2MLP(d)


class GPT2Model(nn.Module):
    def __init__(self, vocab, ctx, d, layers):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(ctx, d)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList([GPT2Block(d) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, d=768, layers=12, vocab=50257, ctx=1024):
        super().__init__()
        self.transformer = GPT2Model(vocab, ctx, d, layers)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as in GPT-2


# --- random models for the comparison with _recursive_wrap ----------------------------------

class Block(nn.Module):
    def __init__(self, rng, depth):
        super().__init__()
        for i in range(rng.randint(1, 3)):
            self.add_module(f"f{i}", random_module(rng, depth + 1))


def random_module(rng, depth):
    r = rng.random()
    if depth >= 4 or r < 0.35:
        k = rng.random()
        if k < 0.6:
            return nn.Linear(rng.randint(1, 8), rng.randint(1, 8), bias=rng.random() < 0.7)
        if k < 0.75:
            return nn.BatchNorm1d(rng.randint(1, 6))
        if k < 0.85:
            return nn.LayerNorm(rng.randint(1, 6))
        if k < 0.92:
            return nn.MultiheadAttention(4, 1)
        return nn.ReLU()
    n = rng.randint(1, 4)
    if r < 0.55:
        return nn.Sequential(*[random_module(rng, depth + 1) for _ in range(n)])
    if r < 0.75:
        return nn.ModuleList([random_module(rng, depth + 1) for _ in range(n)])
    return Block(rng, depth)


def random_model(seed):
    rng = random.Random(seed)
    m = nn.Sequential(*[random_module(rng, 1) for _ in range(rng.randint(2, 4))])
    # Tie a few weights of equal shape (shared parameters).
    linears = [x for x in m.modules() if isinstance(x, nn.Linear)]
    if len(linears) >= 2 and rng.random() < 0.4:
        a, b = rng.sample(linears, 2)
        if a.weight.shape == b.weight.shape:
            b.weight = a.weight
    return m


# --- expected units from PyTorch --------------------------------------------------------------

def torch_policy(expr, wrap):
    """The torch 1.13 callable for one of the planner's policy expressions used here."""
    classes = {"Linear": nn.Linear, "MultiheadAttention": nn.MultiheadAttention,
               "ModuleList": nn.ModuleList, "ModuleDict": nn.ModuleDict, "Block": Block,
               "BatchNorm1d": nn.BatchNorm1d, "_BatchNorm": nn.modules.batchnorm._BatchNorm,
               "Sequential": nn.Sequential, "LayerNorm": nn.LayerNorm,
               "TransformerEncoderLayer": nn.TransformerEncoderLayer,
               "TransformerDecoderLayer": nn.TransformerDecoderLayer}
    kind, _, rest = expr.partition("(")
    args = rest[:-1]

    def cls_list(s):
        s = s.strip().strip("[]")
        return {classes[n.strip()] for n in s.split(",") if n.strip()}

    if kind == "always":
        return wrap.always_wrap_policy
    if kind == "size":
        kw = {}
        for part in args.split(";"):
            k, _, v = part.partition("=")
            k = k.strip()
            if k == "min_num_params":
                kw["min_num_params"] = int(float(v))
            elif k == "force_leaf":
                kw["force_leaf_modules"] = cls_list(v)
            elif k == "exclude_wrap":
                kw["exclude_wrap_modules"] = cls_list(v)
        return functools.partial(wrap.size_based_auto_wrap_policy, **kw)
    if kind == "transformer":
        return functools.partial(wrap.transformer_auto_wrap_policy,
                                 transformer_layer_cls=cls_list(args))
    if kind == "individually":
        cs = tuple(cls_list(args))

        def individually(module, recurse, unwrapped_params, **_):
            return True if recurse else isinstance(module, cs)
        return individually
    raise ValueError(expr)


def planner_expr(expr):
    """The size() test expressions use ';' between arguments so torch_policy can split them."""
    return expr.replace(";", ",")


def expected_units(model, expr, ignore, wrap):
    ignored_modules = set()
    for path in ignore:
        ignored_modules.update(model.get_submodule(path).modules())
    ignored_params = {p for m in ignored_modules for p in m.parameters()}
    order = []

    def recorder(module, **kwargs):
        order.append(module)
        return module

    if expr is not None:
        wrap._recursive_wrap(model, auto_wrap_policy=torch_policy(expr, wrap), wrapper_cls=recorder,
                             ignored_modules=ignored_modules, ignored_params=ignored_params,
                             only_wrap_children=True)
    order.append(model)
    names = {}
    for n, m in model.named_modules():
        names.setdefault(m, n)
    managed = set()
    done = set()
    units = []
    for m in order:
        prefix = names[m]
        params = []
        # FSDP flattens module.parameters() minus ignored and already flattened ones.
        for n, p in m.named_parameters(prefix=prefix):
            if p in ignored_params or p in managed:
                continue
            managed.add(p)
            params.append(n)
        units.append({"fqn": prefix, "params": params})
        done.add(m)
    return units


def write(name, model):
    path = os.path.join(OUT, name)
    with open(path, "w") as f:
        json.dump(export_model(model), f, separators=(",", ":"))
        f.write("\n")
    return name


def main():
    os.makedirs(OUT, exist_ok=True)
    wrap = import_wrap()
    torch.manual_seed(0)
    models = {
        "nested_sequential.json": nested_sequential(),
        "modulelist_2x_linear5.json": nn.ModuleList([nn.Linear(5, 5), nn.Linear(5, 5)]),
        "modulelist_linear10.json": nn.ModuleList([nn.Linear(10, 10)]),
        "force_leaf_mha.json": nn.Sequential(nn.Linear(10, 10), nn.MultiheadAttention(100, 1)),
        "force_leaf_custom.json": nn.Sequential(nn.Linear(10, 10),
                                                nn.ModuleList([nn.Linear(10, 10)])),
        "transformer_shared_params.json": TransformerWithSharedParams(),
        "batchnorm_net.json": BatchNormNet(),
        "lora_model.json": LoraModel(),
    }
    for name, model in models.items():
        write(name, model)
    write("gpt2_small.json", GPT2LMHeadModel(768, 12))
    write("gpt2_medium.json", GPT2LMHeadModel(1024, 24))

    cases = []

    def case(model_name, model, expr, ignore=()):
        cases.append({"model": model_name, "policy": planner_expr(expr) if expr else None,
                      "ignore": list(ignore),
                      "units": expected_units(model, expr, list(ignore), wrap)})

    ns = models["nested_sequential.json"]
    case("nested_sequential.json", ns, None)
    case("nested_sequential.json", ns, "always()")
    case("nested_sequential.json", ns, "size(min_num_params=40)")
    case("nested_sequential.json", ns, "size(min_num_params=0)")
    case("nested_sequential.json", ns, "always()", ["1", "2.0"])
    case("nested_sequential.json", ns, "size(min_num_params=40)", ["1", "2.0"])
    case("modulelist_2x_linear5.json", models["modulelist_2x_linear5.json"],
         "size(min_num_params=40)")
    case("modulelist_linear10.json", models["modulelist_linear10.json"],
         "size(min_num_params=40)")
    case("force_leaf_mha.json", models["force_leaf_mha.json"], "size(min_num_params=40)")
    case("force_leaf_custom.json", models["force_leaf_custom.json"],
         "size(min_num_params=40; force_leaf=[MultiheadAttention, Linear])")
    tsp = models["transformer_shared_params.json"]
    case("transformer_shared_params.json", tsp,
         "transformer([TransformerEncoderLayer, TransformerDecoderLayer])")
    case("transformer_shared_params.json", tsp, "size(min_num_params=1000)")
    case("transformer_shared_params.json", tsp, "always()", ["transformer"])
    case("batchnorm_net.json", models["batchnorm_net.json"], "individually([_BatchNorm])")

    policies = ["always()", "size(min_num_params=0)", "size(min_num_params=20)",
                "size(min_num_params=60)", "size(min_num_params=150)",
                "size(min_num_params=30; force_leaf=[Linear])",
                "size(min_num_params=30; exclude_wrap=[Sequential])",
                "transformer([Block])", "transformer([Linear, LayerNorm])",
                "individually([BatchNorm1d])"]
    for seed in range(24):
        model = random_model(seed)
        name = write(f"random_{seed}.json", model)
        for expr in policies:
            case(name, model, expr)
        # An ignored subtree: the first child.
        case(name, model, "size(min_num_params=20)", ["0"])
    with open(os.path.join(OUT, "torch_expected.json"), "w") as f:
        json.dump({"generator": "tests/tools/gen_plan_fixtures.py",
                   "torch": torch.__version__, "cases": cases}, f, indent=0)
        f.write("\n")
    print(f"{len(cases)} cases")


if __name__ == "__main__":
    main()
