#!/opt/torch2/bin/python
"""Writes tests/fixtures/functional_transformer.json: PyTorch reference values for the ops the
Hugging Face models need (rms_norm, silu, apply_rotary, scaled_dot_product_attention).

Run with a torch that has scaled_dot_product_attention's enable_gqa (2.5 or later):
/opt/torch2/bin/python tests/core/functional/gen_transformer_fixtures.py

The cases have gen_functional_fixtures.py's layout (float64 inputs, a fixed upstream gradient
`gy`, outputs and gradients in float64 and float32). rms_norm and rotary are written as
transformers' LlamaRMSNorm and apply_rotary_pos_emb write them; their cases also hold `out_bf16`,
the bfloat16 result of the same torch code on the inputs rounded to bfloat16. Boolean masks are
stored as 0/1 (`mask01`); non-tensor parameters live in the C++ test next to the case names.
"""
import json
import math
import os

import torch
import torch.nn.functional as F

from gen_functional_fixtures import OUT_DIR, enc, randn, run


def llama_rms_norm(x, w, eps):
    # LlamaRMSNorm.forward; float64 stays float64 here (the C++ op computes it natively).
    dtype = x.dtype
    h = x if dtype == torch.float64 else x.to(torch.float32)
    var = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(var + eps)
    return w * h.to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope(x, cos, sin):
    if cos.dim() == 3:  # (B, S, D): unsqueeze the head dim as apply_rotary_pos_emb does
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (x * cos) + (rotate_half(x) * sin)


def cos_sin(dim, theta, positions):
    """LlamaRotaryEmbedding's default tables for `positions` (a (B, S) int tensor), float64."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    freqs = positions.float()[..., None] * inv_freq  # float32, as the model computes them
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().double(), emb.sin().double()


def with_bf16(case, fn, inputs):
    bf = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in inputs.items()}
    case["out_bf16"] = enc(fn(**bf).double())
    return case


def cases():
    out = {}
    for name, shape, eps in (("rms_norm_2d", (4, 8), 1e-6), ("rms_norm_3d", (2, 3, 16), 1e-5)):
        x = randn(*shape, seed=len(out) + 40) * 2 + 0.5
        w = randn(shape[-1], seed=len(out) + 60) + 1
        fn = lambda x, w, eps=eps: llama_rms_norm(x, w, eps)
        out[name] = with_bf16(run(fn, {"x": x, "w": w}, ["x", "w"]), fn, {"x": x, "w": w})

    x = randn(5, 7, seed=70) * 4
    out["silu"] = run(lambda x: x * torch.sigmoid(x), {"x": x}, ["x"])

    # LlamaRotaryEmbedding.compute_default_rope_parameters, bit for bit (float32 values).
    out["rotary_inv_freq"] = {
        "d%d_t%g" % (dim, theta): enc(
            (1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))).double())
        for dim, theta in ((8, 10000.0), (64, 10000.0), (128, 500000.0), (128, 1000000.0))}

    x = randn(2, 3, 5, 8, seed=71)
    c, s = cos_sin(8, 10000.0, torch.arange(3, 8)[None])
    inputs = {"x": x, "cos": c[0], "sin": s[0]}
    out["rotary_shared"] = with_bf16(run(rope, inputs, ["x"]), rope, inputs)
    c, s = cos_sin(8, 500000.0, torch.tensor([[0, 1, 2, 3, 4], [7, 9, 11, 13, 15]]))
    inputs = {"x": x, "cos": c, "sin": s}
    out["rotary_per_batch"] = with_bf16(run(rope, inputs, ["x"]), rope, inputs)

    def sdpa_case(seed, q_shape, kv_shape, dv, mask=None, bool_mask=False, **kw):
        q = randn(*q_shape, seed=seed)
        k = randn(*kv_shape, seed=seed + 1)
        v = randn(*kv_shape[:3], dv, seed=seed + 2)
        inputs = {"q": q, "k": k, "v": v}
        if mask is not None:
            inputs["mask01" if bool_mask else "mask"] = mask

        def fn(q, k, v, mask=None, mask01=None):
            m = mask01 > 0.5 if mask01 is not None else mask
            return F.scaled_dot_product_attention(q, k, v, attn_mask=m, **kw)

        return run(fn, inputs, ["q", "k", "v"])

    out["sdpa_plain"] = sdpa_case(80, (2, 3, 5, 4), (2, 3, 7, 4), 6)
    out["sdpa_causal_l_lt_s"] = sdpa_case(81, (1, 2, 5, 4), (1, 2, 7, 4), 4, is_causal=True)
    out["sdpa_causal_l_gt_s"] = sdpa_case(82, (1, 2, 7, 4), (1, 2, 5, 4), 4, is_causal=True)
    out["sdpa_gqa_causal"] = sdpa_case(83, (2, 4, 6, 8), (2, 2, 6, 8), 8, is_causal=True,
                                       enable_gqa=True)
    # A padding mask (B, 1, 1, S) and a row mask with one query that sees no key (output 0).
    pad = torch.ones(2, 1, 1, 6, dtype=torch.float64)
    pad[1, 0, 0, 4:] = 0
    out["sdpa_bool_padding"] = sdpa_case(84, (2, 2, 3, 4), (2, 2, 6, 4), 4, pad, True)
    rows = (randn(3, 1, 5, 6, seed=85) > 0).double()
    rows[1, 0, 2, :] = 0
    out["sdpa_bool_rows_empty"] = sdpa_case(86, (3, 2, 5, 4), (3, 2, 6, 4), 4, rows, True)
    add = randn(5, 6, seed=87) * 2
    out["sdpa_additive_scale"] = sdpa_case(88, (2, 3, 5, 4), (2, 3, 6, 4), 3, add, scale=0.3)
    return out


def main():
    doc = {"generator": "tests/core/functional/gen_transformer_fixtures.py",
           "torch_version": torch.__version__, "cases": cases()}
    path = os.path.join(OUT_DIR, "functional_transformer.json")
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
