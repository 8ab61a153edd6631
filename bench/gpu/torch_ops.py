#!/usr/bin/env python3
"""Times with PyTorch (eager, bf16) the ops bench_gpu_kernels timed, on the same GPU in the same
run and the same way (CUDA events around each call, the median of --iters after 3 warm-ups), and
prints ours, PyTorch's and the ratio per op (>1: ours is faster), with TFLOP/s for the products.

    bench_gpu_kernels --tokens 16384 --json ours.json
    python3 bench/gpu/torch_ops.py --ours ours.json --tokens 16384

--ours is bench_gpu_kernels' --json report (bench/common/report.h): a row {"op", "ms", "flop"}
per op.
"""
import argparse
import json
import math
import statistics
import sys

import torch
import torch.nn.functional as F


def time_ms(fn, iters):
    for _ in range(3):
        fn()
    times = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def torch_ops(tokens):
    """(name, fn) in bench_gpu_kernels' names; the tensors live as long as the closures."""
    dev, bf = "cuda", torch.bfloat16
    D, Fd, V, H, T = 768, 3072, 50304, 12, 1024
    N, hd = tokens, 768 // 12
    BH = N // T * H
    g = torch.Generator(device=dev).manual_seed(0)

    def randn(*shape, scale=1.0, dtype=bf):
        return (torch.randn(*shape, device=dev, generator=g) * scale).to(dtype)

    ops = []
    x = randn(N, Fd, scale=0.1)
    w = randn(V, D, scale=0.02)
    bias = randn(V)
    x768 = x[:, :D].contiguous()
    ops.append(("linear_qkv N,768->2304",
                lambda w3=w[:3 * D].contiguous(), b3=bias[:3 * D].contiguous():
                F.linear(x768, w3, b3)))
    ops.append(("linear_fc N,768->3072",
                lambda w4=w[:Fd].contiguous(), b4=bias[:Fd].contiguous(): F.linear(x768, w4, b4)))
    wp = randn(D, Fd, scale=0.02)
    ops.append(("linear_proj N,3072->768", lambda: F.linear(x, wp, bias[:D])))
    ops.append(("lm_head N,768->50304", lambda: F.linear(x768, w)))
    dy_fc, w_fc = randn(N, Fd), randn(Fd, D, scale=0.02)
    ops.append(("linear_fc_bwd N,768->3072",  # F.linear's backward: two products, the bias sum
                lambda: (dy_fc @ w_fc, dy_fc.t() @ x768, dy_fc.sum(0))))

    q, k = randn(BH, T, hd), randn(BH, T, hd)
    probs = randn(BH, T, T)
    ops.append(("attn_scores bmm", lambda: torch.bmm(q, k.transpose(1, 2))))
    ops.append(("attn_probs_v bmm", lambda: torch.bmm(probs, k)))
    scale = 1.0 / math.sqrt(hd)
    causal = torch.ones(T, T, device=dev, dtype=torch.bool).tril()
    scores = randn(BH, T, T)
    ops.append(("causal_softmax_fwd",
                lambda: torch.softmax((scores * scale).masked_fill(~causal, float("-inf")), -1)))
    qh, kh, vh = q.view(-1, H, T, hd), k.view(-1, H, T, hd), randn(BH, T, hd).view(-1, H, T, hd)
    ops.append(("attention_fwd",
                lambda: F.scaled_dot_product_attention(qh, kh, vh, is_causal=True)))
    # Backward alone: one forward kept (retain_graph), its gradients timed.
    qg, kg, vg = (x.detach().requires_grad_() for x in (qh, kh, vh))
    out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=True)
    dout = torch.randn_like(out)
    ops.append(("attention_bwd",
                lambda: torch.autograd.grad(out, (qg, kg, vg), dout, retain_graph=True)))
    # Grouped-query heads: 3 query heads a kv head (enable_gqa), as bench_gpu_kernels'.
    kv_h = H // 3
    kq, vq = randn(BH // H, kv_h, T, hd), randn(BH // H, kv_h, T, hd)
    ops.append(("attention_gqa_fwd H12/KV4",
                lambda: F.scaled_dot_product_attention(qh, kq, vq, is_causal=True,
                                                       enable_gqa=True)))
    qg2, kg2, vg2 = (x.detach().requires_grad_() for x in (qh, kq, vq))
    out2 = F.scaled_dot_product_attention(qg2, kg2, vg2, is_causal=True, enable_gqa=True)
    ops.append(("attention_gqa_bwd H12/KV4",
                lambda: torch.autograd.grad(out2, (qg2, kg2, vg2), dout, retain_graph=True)))
    # Head dim 128: half as many heads of twice the width, as bench_gpu_kernels'.
    q3, k3, v3 = (randn(BH // H, H // 2, T, 2 * hd) for _ in range(3))
    ops.append(("attention_fwd hd128",
                lambda: F.scaled_dot_product_attention(q3, k3, v3, is_causal=True)))
    qg3, kg3, vg3 = (x.detach().requires_grad_() for x in (q3, k3, v3))
    out3 = F.scaled_dot_product_attention(qg3, kg3, vg3, is_causal=True)
    dout3 = torch.randn_like(out3)
    ops.append(("attention_bwd hd128",
                lambda: torch.autograd.grad(out3, (qg3, kg3, vg3), dout3, retain_graph=True)))
    y = torch.softmax((scores * scale).masked_fill(~causal, float("-inf")), -1)
    dy = randn(BH, T, T)
    ops.append(("causal_softmax_bwd",
                lambda: torch.ops.aten._softmax_backward_data(dy, y, -1, bf) * scale))

    xl, dyl = randn(N, D), randn(N, D)
    lw, lb = randn(D), randn(D)
    ops.append(("layer_norm_fwd N,768", lambda: F.layer_norm(xl, (D,), lw, lb, 1e-5)))
    _, mean, rstd = torch.ops.aten.native_layer_norm(xl, [D], lw, lb, 1e-5)
    ops.append(("layer_norm_bwd N,768",
                lambda: torch.ops.aten.native_layer_norm_backward(
                    dyl, xl, [D], mean, rstd, lw, lb, [True, True, True])))
    xf, dyf = randn(N, Fd), randn(N, Fd)
    ops.append(("gelu_fwd N,3072", lambda: F.gelu(xf, approximate="tanh")))
    ops.append(("gelu_bwd N,3072",
                lambda: torch.ops.aten.gelu_backward(dyf, xf, approximate="tanh")))
    ops.append(("residual_add N,768", lambda: xl + dyl))
    ops.append(("bias_grad N,3072", lambda: dyf.sum(0, dtype=torch.float32)))

    # The Llamas' own ops at TinyLlama's widths, as bench_gpu_kernels' rows.
    LD, LH, LF = 2048, 32, 5632
    xr, dyr, wr = randn(N, LD), randn(N, LD), randn(LD)
    ops.append(("rms_norm_fwd N,2048", lambda: F.rms_norm(xr, (LD,), wr, 1e-5)))
    xrg, wrg = xr.detach().requires_grad_(), wr.detach().requires_grad_()
    yr = F.rms_norm(xrg, (LD,), wrg, 1e-5)
    ops.append(("rms_norm_bwd N,2048",
                lambda: torch.autograd.grad(yr, (xrg, wrg), dyr, retain_graph=True)))
    qp = randn(N // T, T, LH, hd).transpose(1, 2)  # transformers' q: a view of the projection
    cos, sin = randn(T, hd), randn(T, hd)

    def rotate_half(t):
        return torch.cat((-t[..., hd // 2:], t[..., :hd // 2]), -1)

    ops.append(("rotary N,32x64", lambda: qp * cos + rotate_half(qp) * sin))
    xs, dys = randn(N, LF), randn(N, LF)
    ops.append(("silu_fwd N,5632", lambda: F.silu(xs)))
    ops.append(("silu_bwd N,5632", lambda: torch.ops.aten.silu_backward(dys, xs)))

    logits = randn(N, V)
    target = torch.randint(0, V, (N,), device=dev, generator=g)

    def ce():
        lg = logits.detach().requires_grad_()
        F.cross_entropy(lg, target).backward()
        return lg.grad

    ops.append(("cross_entropy_fused N,50304", ce))
    ops.append(("cross_entropy N,50304", ce))  # train_gpt's (the kernel table's) loss
    ops.append(("embedding_fwd N,768", lambda: F.embedding(target, w)))
    demb = randn(N, D)
    ops.append(("embedding_bwd N,768",
                lambda: torch.ops.aten.embedding_dense_backward(demb, target, V, -1, False)))

    P = 124439808
    param = torch.nn.Parameter(torch.randn(P, device=dev, generator=g))
    param.grad = torch.randn(P, device=dev, generator=g)
    opt = torch.optim.AdamW([param], lr=1e-3, weight_decay=0.1, fused=True)
    ops.append(("adamw 124M fp32", opt.step))
    ops.append(("sum_of_squares 124M fp32", lambda: torch.linalg.vector_norm(param.grad)))
    return ops


def read_ours(path):
    """{op: (ms, flop)} from bench_gpu_kernels' --json report; exits with one line if it is not
    one."""
    try:
        with open(path) as f:
            rep = json.load(f)
        if rep.get("program") != "bench_gpu_kernels":
            raise ValueError("its program is %r, not bench_gpu_kernels" % rep.get("program"))
        return {r["op"]: (float(r["ms"]), float(r["flop"])) for r in rep["rows"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit("torch_ops.py: error: --ours %s is not a bench_gpu_kernels --json report: %s"
                 % (path, e))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ours", required=True, help="bench_gpu_kernels --json FILE")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    ours = read_ours(args.ours)
    if not torch.cuda.is_available():
        print("torch_ops.py: torch sees no CUDA device: skipping")
        return 77
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}; tokens {args.tokens}; "
          "bf16, eager; median of %d calls" % args.iters)
    print(f"{'op':28} {'ours ms':>9} {'torch ms':>9} {'torch/ours':>10} {'ours TF/s':>9} "
          f"{'torch TF/s':>10}")
    slower = 0
    for name, fn in torch_ops(args.tokens):
        t = time_ms(fn, args.iters)
        if name not in ours:
            print(f"{name:28} {'-':>9} {t:9.4f}")
            continue
        ms, flop = ours[name]
        ratio = t / ms
        slower += ratio < 1.0
        tf = f"{flop / ms / 1e9:9.1f} {flop / t / 1e9:10.1f}" if flop else ""
        print(f"{name:28} {ms:9.4f} {t:9.4f} {ratio:10.2f} {tf}")
    print(f"ops where ours is slower than PyTorch eager: {slower}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
