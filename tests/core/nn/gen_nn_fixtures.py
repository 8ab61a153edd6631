#!/usr/bin/python3
"""Writes the torch.nn reference fixtures for tests/core/nn (run with Debian's /usr/bin/python3,
PyTorch 1.13): tests/fixtures/nn_layers.json (state dicts, inputs, outputs and gradients),
nn_structure.json (parameter/buffer names, shapes, reprs) and nn_optim.json (optimizer steps)."""
import json
import math
import os

import torch
import torch.nn as nn

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fixtures")
DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64",
          torch.bool: "bool"}


def t2j(t):
    t = t.detach()
    data = t.reshape(-1).tolist()
    if t.dtype == torch.bool:
        data = [1 if x else 0 for x in data]
    elif t.is_floating_point():  # JSON has no infinities: the loader reads "inf" strings
        data = [x if math.isfinite(x) else str(x) for x in data]
    return {"shape": list(t.shape), "dtype": DTYPES[t.dtype], "data": data}


def write(name, cases):
    path = os.path.join(OUT, name)
    with open(path, "w") as f:
        json.dump({"generator": "tests/core/nn/gen_nn_fixtures.py",
                   "torch_version": torch.__version__, "cases": cases}, f, separators=(",", ":"))
    print(path, os.path.getsize(path))


# --- layers: state, inputs, outputs, gradients of sum(output * grad_output)
def run_case(module, inputs, kwargs=None, dtype=torch.float32, train=False, seed=0):
    kwargs = kwargs or {}
    module = module.to(dtype)
    module.train(train)
    case = {}
    for k, v in module.state_dict().items():
        case["state." + k] = t2j(v)
    # The same tensor passed twice (self-attention) stays one tensor: "aliases" maps each
    # argument to its distinct input.
    ins, aliases, seen = [], [], {}
    for orig in inputs:
        if id(orig) not in seen:
            seen[id(orig)] = len(ins)
            x = orig.to(dtype).requires_grad_(True) if orig.is_floating_point() else orig
            case["input%d" % len(ins)] = t2j(x)
            ins.append(x)
        aliases.append(seen[id(orig)])
    case["aliases"] = aliases
    flags = {k: v for k, v in kwargs.items() if isinstance(v, bool)}
    if flags:
        case["kw_flags"] = flags
    for k, v in kwargs.items():
        if isinstance(v, torch.Tensor):
            if v.is_floating_point():
                v = v.to(dtype)
                kwargs[k] = v
            case["kw." + k] = t2j(v)
    out = module(*[ins[a] for a in aliases], **kwargs)
    weights = None
    if isinstance(out, tuple):
        out, weights = out
    case["output"] = t2j(out)
    if weights is not None:
        case["weights"] = t2j(weights)
    g = torch.Generator().manual_seed(seed + 1000)
    go = torch.randn(out.shape, generator=g, dtype=torch.float64).to(dtype)
    case["grad_output"] = t2j(go)
    (out * go).sum().backward()
    for i, x in enumerate(ins):
        if x.grad is not None:
            case["grad_input%d" % i] = t2j(x.grad)
    for n, p in module.named_parameters():
        if p.grad is not None:
            case["grad." + n] = t2j(p.grad)
    for k, v in module.state_dict().items():  # buffers after the step (running stats)
        if k in dict(module.named_buffers()):
            case["after." + k] = t2j(v)
    return case


def layer_cases():
    cases = {}
    for dt, sfx in ((torch.float32, "f32"), (torch.float64, "f64")):
        torch.manual_seed(1)
        cases["linear_" + sfx] = run_case(nn.Linear(5, 4), [torch.randn(3, 5)], dtype=dt)
        torch.manual_seed(2)
        cases["layer_norm_" + sfx] = run_case(_perturb(nn.LayerNorm(6)), [torch.randn(2, 3, 6)],
                                              dtype=dt)
        torch.manual_seed(3)
        mha = _perturb(nn.MultiheadAttention(8, 2))
        x = torch.randn(4, 2, 8)
        cases["mha_self_" + sfx] = run_case(mha, [x, x, x], dtype=dt)
        torch.manual_seed(4)
        enc = _perturb(nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0))
        cases["encoder_layer_" + sfx] = run_case(enc, [torch.randn(5, 2, 8)], dtype=dt)
    torch.manual_seed(5)
    cases["linear_nobias"] = run_case(nn.Linear(4, 3, bias=False), [torch.randn(2, 2, 4)])
    torch.manual_seed(6)
    cases["layer_norm_2d"] = run_case(_perturb(nn.LayerNorm([3, 4], eps=1e-3)),
                                      [torch.randn(2, 3, 4)])
    torch.manual_seed(7)
    cases["embedding"] = run_case(nn.Embedding(10, 4, padding_idx=2),
                                  [torch.tensor([[1, 2, 3], [2, 9, 1]])])
    torch.manual_seed(8)
    cases["bn1d_train_2d"] = run_case(_perturb(nn.BatchNorm1d(3)), [torch.randn(6, 3)], train=True)
    torch.manual_seed(9)
    cases["bn1d_train_3d"] = run_case(_perturb(nn.BatchNorm1d(3, momentum=None)),
                                      [torch.randn(4, 3, 5)], train=True)
    torch.manual_seed(10)
    bn = nn.BatchNorm2d(3)
    _perturb(bn)
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    cases["bn2d_eval"] = run_case(bn, [torch.randn(2, 3, 4, 4)], train=False)
    torch.manual_seed(11)
    cases["bn3d_train"] = run_case(nn.BatchNorm3d(2, affine=False), [torch.randn(2, 2, 2, 3, 3)],
                                   train=True)
    torch.manual_seed(12)
    cases["bn1d_untracked"] = run_case(nn.BatchNorm1d(3, track_running_stats=False),
                                       [torch.randn(5, 3)], train=False)
    # MultiheadAttention variants.
    torch.manual_seed(13)
    mha = _perturb(nn.MultiheadAttention(8, 2, kdim=4, vdim=6, batch_first=True))
    cases["mha_kdim_batch_first"] = run_case(
        mha, [torch.randn(2, 3, 8), torch.randn(2, 5, 4), torch.randn(2, 5, 6)])
    torch.manual_seed(14)
    mha = _perturb(nn.MultiheadAttention(8, 2))
    q, k = torch.randn(4, 2, 8), torch.randn(5, 2, 8)
    attn = torch.rand(4, 5) > 0.7
    attn[:, 0] = False
    kpm = torch.tensor([[False, False, False, True, True], [False, True, False, False, False]])
    cases["mha_bool_masks"] = run_case(mha, [q, k, k], {"attn_mask": attn,
                                                        "key_padding_mask": kpm})
    torch.manual_seed(15)
    mha = _perturb(nn.MultiheadAttention(8, 4))
    q = torch.randn(3, 2, 8)
    cases["mha_float_mask_per_head"] = run_case(
        mha, [q, q, q], {"attn_mask": torch.randn(8, 3, 3), "average_attn_weights": False})
    torch.manual_seed(16)
    mha = _perturb(nn.MultiheadAttention(8, 2, add_bias_kv=True, add_zero_attn=True))
    q, k = torch.randn(3, 2, 8), torch.randn(4, 2, 8)
    kpm = torch.tensor([[False, False, True, False], [False, False, False, False]])
    cases["mha_bias_kv_zero_attn"] = run_case(mha, [q, k, k], {"key_padding_mask": kpm})
    torch.manual_seed(17)
    mha = _perturb(nn.MultiheadAttention(6, 3, bias=False))
    q = torch.randn(4, 6)
    cases["mha_unbatched_nobias"] = run_case(mha, [q, q, q])
    # Transformer layers.
    torch.manual_seed(18)
    enc = _perturb(nn.TransformerEncoderLayer(8, 2, 16, 0.0, activation="gelu", norm_first=True,
                                              batch_first=True))
    x = torch.randn(2, 4, 8)
    kpm = torch.tensor([[False, False, False, True], [False, False, False, False]])
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    cases["encoder_layer_gelu_norm_first"] = run_case(
        enc, [x], {"src_mask": mask, "src_key_padding_mask": kpm})
    torch.manual_seed(19)
    dec = _perturb(nn.TransformerDecoderLayer(8, 2, 16, 0.0))
    causal = nn.Transformer.generate_square_subsequent_mask(3)
    cases["decoder_layer"] = run_case(dec, [torch.randn(3, 2, 8), torch.randn(5, 2, 8)],
                                      {"tgt_mask": causal})
    torch.manual_seed(20)
    tr = _perturb(nn.Transformer(8, 2, 1, 1, 16, 0.0))
    cases["transformer"] = run_case(tr, [torch.randn(5, 2, 8), torch.randn(3, 2, 8)],
                                    {"tgt_mask": nn.Transformer.generate_square_subsequent_mask(3)})
    torch.manual_seed(21)
    seq = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 5), nn.GELU(), nn.Dropout(0.3),
                        nn.Linear(5, 2))
    cases["sequential_eval"] = run_case(seq, [torch.randn(3, 4)], train=False)
    torch.manual_seed(22)
    cases["gelu_tanh"] = run_case(nn.GELU(approximate="tanh"), [torch.randn(3, 4)])
    return cases


def _perturb(m):
    """Moves LayerNorm/BatchNorm affine parameters and zero biases off their trivial
    initial values, so the comparison exercises them."""
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.add_(0.1 * torch.randn(p.shape))
    return m


# --- structure: names, shapes, reprs, class ancestry
def names_shapes(items):
    return [[n, list(t.shape), DTYPES[t.dtype]] for n, t in items]


def structure_cases():
    models = {
        "linear": nn.Linear(5, 5),
        "linear_nobias": nn.Linear(3, 2, bias=False),
        "embedding": nn.Embedding(10, 3, padding_idx=-1),
        "layer_norm": nn.LayerNorm([4, 5], elementwise_affine=False),
        "bn1d": nn.BatchNorm1d(4),
        "bn2d_untracked": nn.BatchNorm2d(4, momentum=None, affine=False, track_running_stats=False),
        "sync_bn": nn.SyncBatchNorm(6),
        "mha": nn.MultiheadAttention(8, 2),
        "mha_kdim_bias_kv": nn.MultiheadAttention(8, 2, kdim=4, vdim=6, add_bias_kv=True),
        "encoder_layer": nn.TransformerEncoderLayer(16, 4, 32),
        "decoder_layer": nn.TransformerDecoderLayer(16, 4, 32),
        "transformer_small": nn.Transformer(16, 4, 2, 1, 32),
        "transformer_default": nn.Transformer(),
        "containers": nn.Sequential(
            nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.25), nn.GELU(),
            nn.ModuleList([nn.Linear(8, 8), nn.Identity(), nn.LayerNorm(8)]),
            nn.ModuleDict({"norm": nn.BatchNorm1d(8), "emb": nn.Embedding(5, 8, padding_idx=0)}),
            nn.BatchNorm3d(8, eps=1e-3, momentum=None), nn.GELU(approximate="tanh"),
            nn.ReLU(inplace=True)),
    }
    cases = {}
    for name, m in models.items():
        c = {"parameters": names_shapes(m.named_parameters()),
             "buffers": names_shapes(m.named_buffers()),
             "state_dict": [k for k in m.state_dict().keys()],
             "modules": [[n, type(mod).__name__] for n, mod in m.named_modules()],
             "num_parameters": sum(p.numel() for p in m.parameters())}
        if name != "transformer_default":
            c["repr"] = repr(m)
        cases[name] = c
    cases["mro"] = {cls.__name__: [k.__name__ for k in cls.__mro__ if k is not object]
                    for cls in (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm,
                                nn.Dropout, nn.Linear,
                                nn.modules.linear.NonDynamicallyQuantizableLinear,
                                nn.MultiheadAttention, nn.LayerNorm, nn.Sequential)}
    return cases


# --- optimizers: parameters after each of 3 steps with fixed gradients
def optim_cases():
    specs = {
        "sgd": (torch.optim.SGD, {"lr": 0.1}),
        "sgd_momentum_wd": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "dampening": 0.1,
                                              "weight_decay": 0.01}),
        "sgd_nesterov": (torch.optim.SGD, {"lr": 0.05, "momentum": 0.8, "nesterov": True,
                                           "weight_decay": 0.02}),
        "sgd_maximize": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.5, "maximize": True}),
        "adam": (torch.optim.Adam, {"lr": 0.01}),
        "adam_wd_amsgrad": (torch.optim.Adam, {"lr": 0.02, "betas": (0.8, 0.99), "eps": 1e-6,
                                               "weight_decay": 0.1, "amsgrad": True}),
        "adamw": (torch.optim.AdamW, {"lr": 0.01}),
        "adamw_amsgrad_maximize": (torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.05,
                                                       "amsgrad": True, "maximize": True}),
    }
    cases = {}
    for dt, sfx in ((torch.float32, ""), (torch.float64, "_f64")):
        for seed, (name, (cls, kw)) in enumerate(specs.items()):
            if sfx and name not in ("sgd_momentum_wd", "adam_wd_amsgrad", "adamw"):
                continue
            g = torch.Generator().manual_seed(seed)
            params = [torch.randn(3, 4, generator=g, dtype=torch.float64).to(dt),
                      torch.randn(4, generator=g, dtype=torch.float64).to(dt)]
            params = [p.requires_grad_(True) for p in params]
            opt = cls(params, **kw)
            case = {"options": json.dumps({k: (list(v) if isinstance(v, tuple) else v)
                                           for k, v in kw.items()})}
            for i, p in enumerate(params):
                case["p%d.init" % i] = t2j(p)
            for step in range(3):
                for i, p in enumerate(params):
                    p.grad = torch.randn(p.shape, generator=g, dtype=torch.float64).to(dt)
                    case["p%d.grad%d" % (i, step)] = t2j(p.grad)
                opt.step()
                for i, p in enumerate(params):
                    case["p%d.step%d" % (i, step)] = t2j(p)
            cases[name + sfx] = case
    return cases


if __name__ == "__main__":
    torch.set_num_threads(1)
    write("nn_layers.json", layer_cases())
    write("nn_structure.json", structure_cases())
    write("nn_optim.json", optim_cases())
