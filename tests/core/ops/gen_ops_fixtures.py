#!/usr/bin/python3
"""Writes tests/fixtures/ops_cases.json: forward and backward of core/ops.h ops computed by
PyTorch, for float32 and float64. Run with Debian's /usr/bin/python3 (torch 1.13).

Each case NAME/DTYPE holds inputs x0..xN, outputs out0..outM, upstream gradients gout0..goutM
(random) and, for the differentiable inputs listed in "grad_inputs", their gradients g0..gN of
sum_i(out_i * gout_i). The C++ test maps NAME to the same op (tests/core/ops/op_table.h).
"""
import json
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "fixtures", "ops_cases.json")


def rnd(*shape):
    return torch.randn(shape, dtype=torch.float64)


def pos(*shape):
    return torch.rand(shape, dtype=torch.float64) + 0.5


def idx(values):
    return torch.tensor(values, dtype=torch.int64)


def mask(*shape):
    return torch.rand(*shape) > 0.5


# name: (inputs factory, function of the inputs returning a tensor or a list of tensors)
CASES = {
    "add": (lambda: [rnd(3, 4), rnd(4)], lambda a, b: torch.add(a, b, alpha=2.0)),
    "add_bcast": (lambda: [rnd(2, 1, 3), rnd(4, 1)], lambda a, b: a + b),
    "sub": (lambda: [rnd(3, 4), rnd(3, 1)], lambda a, b: torch.sub(a, b, alpha=0.5)),
    "mul": (lambda: [rnd(2, 1, 3), rnd(4, 1)], lambda a, b: a * b),
    "mul_scalar_tensor": (lambda: [rnd(3, 4), rnd()], lambda a, b: a * b),
    "div": (lambda: [rnd(3, 4), pos(4)], lambda a, b: a / b),
    "maximum": (lambda: [rnd(3, 4), rnd(1, 4)], torch.maximum),
    "minimum": (lambda: [rnd(3, 4), rnd(3, 1)], torch.minimum),
    "add_scalar": (lambda: [rnd(3, 4)], lambda a: a + 1.5),
    "mul_scalar": (lambda: [rnd(3, 4)], lambda a: a * -2.5),
    "div_scalar": (lambda: [rnd(3, 4)], lambda a: a / 3.0),
    "pow3": (lambda: [rnd(3, 4)], lambda a: torch.pow(a, 3.0)),
    "pow2": (lambda: [rnd(3, 4)], lambda a: torch.pow(a, 2.0)),
    "pow_half": (lambda: [pos(3, 4)], lambda a: torch.pow(a, 0.5)),
    "pow_neg": (lambda: [pos(3, 4)], lambda a: torch.pow(a, -1.5)),
    "neg": (lambda: [rnd(3, 4)], torch.neg),
    "exp": (lambda: [rnd(3, 4)], torch.exp),
    "log": (lambda: [pos(3, 4)], torch.log),
    "sqrt": (lambda: [pos(3, 4)], torch.sqrt),
    "rsqrt": (lambda: [pos(3, 4)], torch.rsqrt),
    "abs": (lambda: [rnd(3, 4)], torch.abs),
    "where": (lambda: [mask(3, 4), rnd(3, 4), rnd(4)], torch.where),
    "masked_fill": (lambda: [rnd(3, 4), mask(4)], lambda a, m: a.masked_fill(m, -7.0)),
    "sum_all": (lambda: [rnd(3, 4, 2)], lambda a: a.sum()),
    "sum_dim": (lambda: [rnd(3, 4, 2)], lambda a: a.sum(dim=1)),
    "sum_dims_keep": (lambda: [rnd(3, 4, 2)], lambda a: a.sum(dim=(0, -1), keepdim=True)),
    "mean_all": (lambda: [rnd(3, 4, 2)], lambda a: a.mean()),
    "mean_dims": (lambda: [rnd(3, 4, 2)], lambda a: a.mean(dim=(0, 2))),
    "max_all": (lambda: [rnd(3, 4)], lambda a: a.max()),
    "max_dim": (lambda: [rnd(3, 4, 2)], lambda a: a.max(dim=1)[0]),
    "max_dim_keep": (lambda: [rnd(3, 4)], lambda a: a.max(dim=-1, keepdim=True)[0]),
    "amax": (lambda: [rnd(3, 4, 2)], lambda a: torch.amax(a, dim=(0, 2))),
    "sum_to": (lambda: [rnd(2, 3, 4)], lambda a: a.sum(dim=(0, 2), keepdim=True).squeeze(0)),
    "mm": (lambda: [rnd(3, 4), rnd(4, 5)], torch.mm),
    "mm_transposed": (lambda: [rnd(4, 3), rnd(5, 4)], lambda a, b: torch.mm(a.t(), b.t())),
    "bmm": (lambda: [rnd(2, 3, 4), rnd(2, 4, 5)], torch.bmm),
    "matmul_1d_1d": (lambda: [rnd(4), rnd(4)], torch.matmul),
    "matmul_2d_1d": (lambda: [rnd(3, 4), rnd(4)], torch.matmul),
    "matmul_1d_2d": (lambda: [rnd(4), rnd(4, 5)], torch.matmul),
    "matmul_3d_2d": (lambda: [rnd(2, 3, 4), rnd(4, 5)], torch.matmul),
    "matmul_3d_1d": (lambda: [rnd(2, 3, 4), rnd(4)], torch.matmul),
    "matmul_1d_3d": (lambda: [rnd(4), rnd(2, 4, 5)], torch.matmul),
    "matmul_bcast": (lambda: [rnd(2, 1, 3, 4), rnd(5, 4, 2)], torch.matmul),
    "linear": (lambda: [rnd(2, 3, 4), rnd(5, 4), rnd(5)], torch.nn.functional.linear),
    "linear_nobias": (lambda: [rnd(3, 4), rnd(5, 4)], torch.nn.functional.linear),
    "linear_1d": (lambda: [rnd(4), rnd(5, 4), rnd(5)], torch.nn.functional.linear),
    "view": (lambda: [rnd(3, 4)], lambda a: a.view(2, -1, 3)),
    "reshape_copy": (lambda: [rnd(3, 4)], lambda a: a.t().reshape(-1)),
    "transpose": (lambda: [rnd(2, 3, 4)], lambda a: a.transpose(0, -1) * 1.0),
    "permute": (lambda: [rnd(2, 3, 4)], lambda a: a.permute(2, 0, 1)),
    "unsqueeze": (lambda: [rnd(3, 4)], lambda a: a.unsqueeze(-2)),
    "squeeze": (lambda: [rnd(3, 1, 4)], lambda a: a.squeeze(1)),
    "expand": (lambda: [rnd(3, 1)], lambda a: a.expand(2, -1, 4)),
    "flatten": (lambda: [rnd(2, 3, 4)], lambda a: a.flatten(1)),
    "narrow": (lambda: [rnd(3, 5)], lambda a: a.narrow(1, 1, 3)),
    "select": (lambda: [rnd(3, 5)], lambda a: a.select(1, -2)),
    "contiguous": (lambda: [rnd(3, 5)], lambda a: a.t().contiguous()),
    "clone": (lambda: [rnd(3, 5)], lambda a: a.clone()),
    "cat": (lambda: [rnd(2, 3), rnd(2, 1), rnd(2, 2)], lambda a, b, c: torch.cat([a, b, c], 1)),
    "stack": (lambda: [rnd(2, 3), rnd(2, 3)], lambda a, b: torch.stack([a, b], 1)),
    "split": (lambda: [rnd(5, 2)], lambda a: list(torch.split(a, 2))),
    "split_with_sizes": (lambda: [rnd(2, 6)], lambda a: list(torch.split(a, [1, 3, 2], 1))),
    "chunk": (lambda: [rnd(7, 2)], lambda a: list(torch.chunk(a, 3))),
    "index_select": (lambda: [rnd(4, 3), idx([3, 0, 3, -1 + 4])],
                     lambda a, i: torch.index_select(a, 0, i)),
    "index_select_dim1": (lambda: [rnd(2, 4, 3), idx([2, 1])],
                          lambda a, i: torch.index_select(a, 1, i)),
    "composite": (lambda: [rnd(3, 4), rnd(4, 4)],
                  lambda a, w: (torch.exp(a @ w) / (a * a).sum(-1, keepdim=True)).mean(0)),
}


def encode(t):
    t = t.detach()
    if t.dtype == torch.bool:
        data = [bool(v) for v in t.flatten().tolist()]
    elif t.dtype in (torch.int64, torch.int32):
        data = [int(v) for v in t.flatten().tolist()]
    else:
        data = [float(v) for v in t.flatten().tolist()]
    return {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "data": data}


def main():
    torch.manual_seed(1234)
    cases = {}
    for name, (make, fn) in CASES.items():
        base = make()
        for dtype in (torch.float32, torch.float64):
            inputs = [x.to(dtype).requires_grad_(True) if x.is_floating_point() else x
                      for x in base]
            outs = fn(*inputs)
            outs = outs if isinstance(outs, list) else [outs]
            gouts = [torch.randn(o.shape, dtype=torch.float64).to(dtype) for o in outs]
            grad_inputs = [i for i, x in enumerate(inputs) if x.is_floating_point()]
            grads = torch.autograd.grad(outs, [inputs[i] for i in grad_inputs], gouts)
            case = {"grad_inputs": grad_inputs}
            for i, x in enumerate(inputs):
                case[f"x{i}"] = encode(x)
            for i, (o, g) in enumerate(zip(outs, gouts)):
                case[f"out{i}"] = encode(o)
                case[f"gout{i}"] = encode(g)
            for i, g in zip(grad_inputs, grads):
                case[f"g{i}"] = encode(g)
            cases[f"{name}/{str(dtype).replace('torch.', '')}"] = case
    with open(OUT, "w") as f:
        json.dump({"generator": "tests/core/ops/gen_ops_fixtures.py",
                   "torch_version": torch.__version__, "cases": cases}, f)
    print(f"wrote {len(cases)} cases to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
