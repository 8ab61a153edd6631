#!/usr/bin/env python3
"""transformers' side of bench_finetune.py: the training step of tools/torch_reference/
finetune_ref.py (the same model directory, data order, loss and torch's AdamW), timed. Prints
one JSON line: the loss and wall milliseconds of every step.

    /opt/torch2/bin/python finetune_torch.py --model-dir DIR --data TOKENS --seq T --batch B \
        --steps N --lr 1e-4 --threads N

Run by bench_finetune.py; needs torch and transformers (/opt/torch2).
"""
import argparse
import json
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "torch_reference"))
from finetune_ref import batch, loss_of, read_tokens  # noqa: E402  (one data order, one loss)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model-dir", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--threads", type=int, required=True)
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(a.model_dir, dtype=torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    tokens = read_tokens(a.data)
    losses, step_ms = [], []
    for step in range(a.steps):
        t0 = time.perf_counter()
        x, y = batch(tokens, step, a.batch, a.seq)
        opt.zero_grad()
        loss = loss_of(model, x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        step_ms.append(1000.0 * (time.perf_counter() - t0))
    print(json.dumps({"losses": losses, "step_ms": step_ms,
                      "attn_implementation": model.config._attn_implementation,
                      "torch": torch.__version__, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
