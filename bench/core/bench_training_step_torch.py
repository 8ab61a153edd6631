#!/usr/bin/env python3
"""PyTorch eager baseline for bench_training_step: the same models, shapes and thread count.
Prints one JSON object {"block": ms, "block_cpu": ms, "demo_model": ms, "demo_model_cpu": ms,
"version": ...}: median wall and CPU ms per step."""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class TinyLM(nn.Module):
    """Mirror of examples/tiny_lm.h."""

    def __init__(self, vocab=256, context=64, d_model=128, heads=4, layers=2):
        super().__init__()
        self.context = context
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(context, d_model)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((context, context), float("-inf")), 1))

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.tok_emb(tokens) + self.pos_emb(torch.arange(t).unsqueeze(0))
        for block in self.blocks:
            x = block(x, src_mask=self.mask[:t, :t])
        return self.head(self.ln_f(x))


def median_ms(fn, warmup, iters):
    """Median wall and CPU (process, all threads) milliseconds per call."""
    for _ in range(warmup):
        fn()
    times, cpu = [], []
    for _ in range(iters):
        c0 = time.process_time()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    times.sort()
    cpu.sort()
    return times[len(times) // 2], cpu[len(cpu) // 2]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=20)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)

    block = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
    opt = torch.optim.AdamW(block.parameters())
    x = torch.randn(8, 128, 256)

    def block_step():
        opt.zero_grad()
        block(x).sum().backward()
        opt.step()

    model = TinyLM()
    opt2 = torch.optim.AdamW(model.parameters())
    window = torch.randint(0, 256, (16, 65))

    def model_step():
        opt2.zero_grad()
        logits = model(window[:, :-1])
        F.cross_entropy(logits.reshape(-1, 256), window[:, 1:].reshape(-1)).backward()
        opt2.step()

    block, block_cpu = median_ms(block_step, a.warmup, a.iters)
    demo, demo_cpu = median_ms(model_step, a.warmup, a.iters)
    print(json.dumps({"block": block, "block_cpu": block_cpu, "demo_model": demo,
                      "demo_model_cpu": demo_cpu, "version": torch.__version__}))


if __name__ == "__main__":
    main()
