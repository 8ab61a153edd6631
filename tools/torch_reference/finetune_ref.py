#!/usr/bin/env python3
"""transformers' side of examples/finetune: the model of a save_pretrained directory
(AutoModelForCausalLM, float32), finetune's data order over an llm.c token file for the whole
global batch, torch's SGD / AdamW (torch's defaults; --weight-decay as given), and the loss of
already-shifted inputs (mean cross-entropy over all B*T positions). Prints `step <i> loss <x>`,
and with --eval-data `held-out loss before X after Y`.

    /opt/torch2/bin/python finetune_ref.py --model-dir DIR --data TOKENS --seq 16 --batch 4 \
        --steps 8 --lr 1e-3 --optimizer adamw [--weight-decay 0.0] [--save OUT]

--batch is the global batch: finetune's N ranks x batch B is one process with batch N*B.
Needs transformers (and torch >= 2): /opt/torch2.
"""
import argparse
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

HEADERS = {20240520: (1, np.uint16), 20240801: (7, np.uint32)}


def read_tokens(path):
    """llm.c's token file: 256 int32 (magic, version, count, zeros), then the tokens."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        magic, version, count = int(header[0]), int(header[1]), int(header[2])
        if magic not in HEADERS or HEADERS[magic][0] != version:
            sys.exit(f"{path}: not an llm.c token file (magic {magic}, version {version})")
        tokens = np.frombuffer(f.read(), dtype=HEADERS[magic][1])
    if len(tokens) != count:
        sys.exit(f"{path}: header says {count} tokens, file holds {len(tokens)}")
    return tokens.astype(np.int64)


def batch(tokens, step, global_batch, seq):
    """Sequence j of step i starts at ((i*G + j)*T) mod (n - T - 1)."""
    starts = len(tokens) - seq - 1
    xs, ys = [], []
    for j in range(global_batch):
        o = ((step * global_batch + j) * seq) % starts
        xs.append(tokens[o:o + seq])
        ys.append(tokens[o + 1:o + seq + 1])
    return torch.tensor(np.stack(xs)), torch.tensor(np.stack(ys))


def loss_of(model, x, y):
    logits = model(input_ids=x).logits.float()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model-dir", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--eval-data")
    p.add_argument("--eval-batches", type=int, default=0)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--batch", type=int, required=True, help="the global batch")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--optimizer", choices=["sgd", "adamw"], default="adamw")
    p.add_argument("--weight-decay", type=float)
    p.add_argument("--clip-grad-norm", type=float, default=0.0)
    p.add_argument("--save")
    a = p.parse_args()

    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(a.model_dir, dtype=torch.float32)
    model.train()  # the fixtures' configs have no dropout: train() changes nothing else
    kw = {} if a.weight_decay is None else {"weight_decay": a.weight_decay}
    opt = (torch.optim.SGD(model.parameters(), lr=a.lr, **kw) if a.optimizer == "sgd"
           else torch.optim.AdamW(model.parameters(), lr=a.lr, **kw))
    tokens = read_tokens(a.data)
    held_out = read_tokens(a.eval_data) if a.eval_data else None

    def evaluate():
        with torch.no_grad():
            return sum(loss_of(model, *batch(held_out, i, a.batch, a.seq)).item()
                       for i in range(a.eval_batches)) / a.eval_batches

    before = evaluate() if held_out is not None and a.eval_batches else None
    for step in range(a.steps):
        x, y = batch(tokens, step, a.batch, a.seq)
        opt.zero_grad()
        loss = loss_of(model, x, y)
        loss.backward()
        if a.clip_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip_grad_norm)
        opt.step()
        print(f"step {step} loss {loss.item():.8g}")
    if before is not None:
        print(f"held-out loss before {before:.6f} after {evaluate():.6f}")
    if a.save:
        model.save_pretrained(a.save)


if __name__ == "__main__":
    main()
