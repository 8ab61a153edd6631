#!/usr/bin/python3
"""Writes tests/fixtures/functional_*.json: PyTorch reference values for core/functional.

Run with Debian's python3-torch: /usr/bin/python3 tests/core/functional/gen_functional_fixtures.py

Every case stores its float64 inputs, a fixed upstream gradient `gy`, and for both float64 and
float32 (inputs rounded to float32 first) the forward output and the gradients of every
differentiable input: keys `out_f64`, `gx_f64`, `out_f32`, `gx_f32`, ... Non-tensor parameters
live in the C++ tests, next to the case names.
"""
import json
import os

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "..", "..", "fixtures")


def enc(t):
    t = t.detach()
    data = [v if v == v else "nan" for v in t.reshape(-1).tolist()]
    return {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "data": data}


def run(fn, inputs, diff, extra=None):
    """inputs: name -> float64 tensor (or int tensor); diff: names to differentiate.

    fn(**tensors) returns the output. Also returns state tensors from `extra(tensors)` after the
    call (running stats)."""
    case = {k: enc(v) for k, v in inputs.items()}
    gy = None
    for dt, suffix in ((torch.float64, "f64"), (torch.float32, "f32")):
        ts = {}
        for k, v in inputs.items():
            v = v.clone()
            if v.is_floating_point():
                v = v.to(dt)
                if k in diff:
                    v.requires_grad_(True)
            ts[k] = v
        out = fn(**ts)
        case["out_" + suffix] = enc(out)
        if gy is None:
            g = torch.Generator().manual_seed(1234)
            gy = torch.randn(out.shape, dtype=torch.float64, generator=g)
            case["gy"] = enc(gy)
        if diff:
            grads = torch.autograd.grad(out, [ts[k] for k in diff], gy.to(dt), allow_unused=True)
            for k, gr in zip(diff, grads):
                if gr is None:
                    gr = torch.zeros_like(ts[k])
                case["g" + k + "_" + suffix] = enc(gr)
        if extra:
            for k, v in extra(ts).items():
                case[k + "_" + suffix] = enc(v)
    return case


def randn(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=torch.float64, generator=g)


def softmax_cases():
    cases = {}
    shapes = {"2d_dim1": ((3, 5), 1), "3d_dim1": ((2, 3, 4), 1), "3d_dim0": ((2, 3, 4), 0),
              "3d_dimm1": ((2, 3, 4), -1)}
    for i, (name, (shape, dim)) in enumerate(shapes.items()):
        x = randn(*shape, seed=10 + i) * 3
        cases["softmax_" + name] = run(lambda x: F.softmax(x, dim), {"x": x}, ["x"])
        cases["log_softmax_" + name] = run(lambda x: F.log_softmax(x, dim), {"x": x}, ["x"])
    return cases


def norm_cases():
    cases = {}
    x = randn(4, 6, seed=20) * 2 + 1
    w, b = randn(6, seed=21), randn(6, seed=22)
    cases["layer_norm_2d"] = run(lambda x, w, b: F.layer_norm(x, [6], w, b, 1e-5),
                                 {"x": x, "w": w, "b": b}, ["x", "w", "b"])
    x = randn(2, 3, 4, seed=23)
    w, b = randn(3, 4, seed=24), randn(3, 4, seed=25)
    cases["layer_norm_3d_2dims"] = run(lambda x, w, b: F.layer_norm(x, [3, 4], w, b, 1e-5),
                                       {"x": x, "w": w, "b": b}, ["x", "w", "b"])
    cases["layer_norm_no_affine"] = run(lambda x: F.layer_norm(x, [4], eps=1e-3), {"x": x}, ["x"])

    def bn_case(shape, seed, training, affine=True, momentum=0.1):
        c = shape[1]
        x = randn(*shape, seed=seed) * 2 + 0.5
        inputs = {"x": x, "rm": randn(c, seed=seed + 1) * 0.1,
                  "rv": randn(c, seed=seed + 2).abs() + 0.5}
        diff = ["x"]
        if affine:
            inputs["w"], inputs["b"] = randn(c, seed=seed + 3), randn(c, seed=seed + 4)
            diff += ["w", "b"]

        def fn(x, rm, rv, w=None, b=None):
            return F.batch_norm(x, rm, rv, w, b, training, momentum, 1e-5)

        return run(fn, inputs, diff, extra=lambda ts: {"rm_after": ts["rm"], "rv_after": ts["rv"]})

    cases["batch_norm_train_2d"] = bn_case((4, 3), 30, True)
    cases["batch_norm_train_3d"] = bn_case((2, 3, 5), 40, True)
    cases["batch_norm_train_4d"] = bn_case((2, 3, 2, 2), 50, True)
    cases["batch_norm_train_5d"] = bn_case((2, 2, 2, 2, 2), 60, True, momentum=0.3)
    cases["batch_norm_train_no_affine"] = bn_case((3, 2, 4), 70, True, affine=False)
    cases["batch_norm_eval_3d"] = bn_case((2, 3, 4), 80, False)
    return cases


def loss_cases():
    cases = {}
    x = randn(4, 5, seed=100) * 2
    t = torch.tensor([1, 0, 4, 2])
    for red in ("mean", "sum", "none"):
        cases["cross_entropy_2d_" + red] = run(
            lambda x, t: F.cross_entropy(x, t, reduction=red), {"x": x, "t": t}, ["x"])
    t_ign = torch.tensor([1, -100, 4, 2])
    cases["cross_entropy_ignore_mean"] = run(
        lambda x, t: F.cross_entropy(x, t), {"x": x, "t": t_ign}, ["x"])
    t_ign3 = torch.tensor([1, 3, 3, 2])
    cases["cross_entropy_ignore3_smooth_mean"] = run(
        lambda x, t: F.cross_entropy(x, t, ignore_index=3, label_smoothing=0.1),
        {"x": x, "t": t_ign3}, ["x"])
    for red in ("sum", "none"):
        cases["cross_entropy_smooth_" + red] = run(
            lambda x, t: F.cross_entropy(x, t, ignore_index=3, reduction=red,
                                         label_smoothing=0.25), {"x": x, "t": t_ign3}, ["x"])
    xs = randn(2, 3, 4, seed=101)
    ts = torch.tensor([[0, 2, 1, 2], [1, 1, -100, 0]])
    cases["cross_entropy_spatial_mean"] = run(
        lambda x, t: F.cross_entropy(x, t, label_smoothing=0.05), {"x": xs, "t": ts}, ["x"])
    cases["cross_entropy_spatial_none"] = run(
        lambda x, t: F.cross_entropy(x, t, reduction="none"), {"x": xs, "t": ts}, ["x"])
    x1 = randn(5, seed=102)
    cases["cross_entropy_1d"] = run(lambda x, t: F.cross_entropy(x, t),
                                    {"x": x1, "t": torch.tensor(3)}, ["x"])
    lp = F.log_softmax(x, 1)
    cases["nll_loss_mean_ignore"] = run(lambda x, t: F.nll_loss(x, t), {"x": lp, "t": t_ign},
                                        ["x"])
    cases["nll_loss_sum"] = run(lambda x, t: F.nll_loss(x, t, reduction="sum"),
                                {"x": lp, "t": t}, ["x"])
    cases["nll_loss_spatial_none"] = run(lambda x, t: F.nll_loss(x, t, reduction="none"),
                                         {"x": xs, "t": ts}, ["x"])
    a, b = randn(3, 4, seed=103), randn(3, 4, seed=104)
    for red in ("mean", "sum", "none"):
        cases["mse_loss_" + red] = run(lambda x, t: F.mse_loss(x, t, reduction=red),
                                       {"x": a, "t": b}, ["x", "t"])
    return cases


def misc_cases():
    cases = {}
    x = randn(3, 4, seed=200) * 2
    x[0, 0] = 0.0
    cases["relu"] = run(lambda x: F.relu(x), {"x": x}, ["x"])
    cases["gelu_none"] = run(lambda x: F.gelu(x), {"x": x}, ["x"])
    cases["gelu_tanh"] = run(lambda x: F.gelu(x, approximate="tanh"), {"x": x}, ["x"])
    cases["tanh"] = run(lambda x: torch.tanh(x), {"x": x}, ["x"])
    cases["sigmoid"] = run(lambda x: torch.sigmoid(x), {"x": x}, ["x"])
    w = randn(10, 4, seed=201)
    idx = torch.tensor([[1, 0, 3], [3, 9, 0]])
    cases["embedding"] = run(lambda w, i: F.embedding(i, w), {"w": w, "i": idx}, ["w"])
    cases["embedding_padding"] = run(lambda w, i: F.embedding(i, w, padding_idx=0),
                                     {"w": w, "i": idx}, ["w"])
    return cases


def main():
    groups = {"softmax": softmax_cases, "norm": norm_cases, "loss": loss_cases,
              "misc": misc_cases}
    for name, make in groups.items():
        doc = {"generator": "tests/core/functional/gen_functional_fixtures.py",
               "torch_version": torch.__version__, "cases": make()}
        path = os.path.join(OUT_DIR, "functional_%s.json" % name)
        with open(path, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
        print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
