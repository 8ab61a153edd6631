#!/opt/torch2/bin/python
"""PyTorch side of bench_llama_ops: transformers' LlamaRMSNorm and apply_rotary_pos_emb formulas,
SwiGLU's act(gate) * up and torch's scaled_dot_product_attention (causal, enable_gqa), forward +
backward, on the same shapes and thread count. Prints "op ms" lines and one JSON line."""
import argparse
import json

import torch
import torch.nn.functional as F

from bench_attention_torch import median_ms


def rms_norm(x, w, eps):
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    B, S, H, KV, D, I = 2, args.seq, 16, 4, 64, 2816
    leaf = lambda *shape: torch.randn(*shape, requires_grad=True)
    x, w = leaf(B * S, H * D), leaf(H * D)
    gate, up = leaf(B * S, I), leaf(B * S, I)
    proj = leaf(B, S, H, D)
    inv = 1.0 / (500000.0 ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    emb = torch.cat([torch.arange(S).float()[:, None] * inv] * 2, dim=-1)
    cos, sin = emb.cos(), emb.sin()
    q, k, v = leaf(B, H, S, D), leaf(B, KV, S, D), leaf(B, KV, S, D)
    cases = {
        "rms_norm": lambda: rms_norm(x, w, 1e-5).sum().backward(),
        "swiglu": lambda: (F.silu(gate) * up).sum().backward(),
        "rotary": lambda: (lambda t: t * cos + rotate_half(t) * sin)(
            proj.transpose(1, 2)).sum().backward(),
        "sdpa_gqa_causal": lambda: F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=True).sum().backward(),
    }
    result = {}
    for name, fn in cases.items():
        result[name] = median_ms(fn, args.warmup, args.iters)
        print(f"{name:>18} {result[name]:>10.2f}")
    print(json.dumps({"ms": result, "version": torch.__version__}))


if __name__ == "__main__":
    main()
