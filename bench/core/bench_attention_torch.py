#!/opt/torch2/bin/python
"""PyTorch baseline for bench_attention's sdpa column: torch's scaled_dot_product_attention,
forward + backward, causal, on (1, heads, L, 64) float32 on the CPU with the same thread count.
Prints "L ms" per length and one JSON line {"sdpa_ms": {L: ms}, "version": ...}."""
import argparse
import json
import time

import torch
import torch.nn.functional as F


def median_ms(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[len(times) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--lengths", default="128,256,512,1024,2048")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    result = {}
    for length in (int(x) for x in args.lengths.split(",")):
        q, k, v = (torch.randn(1, args.heads, length, 64, requires_grad=True) for _ in range(3))

        def step():
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()

        result[length] = median_ms(step, args.warmup, args.iters)
        print(f"{length:>6} {result[length]:>10.2f}")
    print(json.dumps({"sdpa_ms": result, "version": torch.__version__}))


if __name__ == "__main__":
    main()
