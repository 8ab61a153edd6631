#!/usr/bin/env python3
"""PyTorch reference for examples/train_gpt: the same byte-level GPT (same FQNs), data order,
optimizers and loss, in one process with the whole global batch. Prints `step <i> loss <x>`.

    python3 train_gpt_ref.py --layers 2 --d-model 32 --heads 4 --seq 16 --batch 4 --steps 8 \
        --lr 0.1 --optimizer sgd --data FILE --load init.safetensors
    python3 train_gpt_ref.py --layers 2 --d-model 32 --heads 4 --seq 16 --save-init init.safetensors

Works with torch 1.13 (Debian's python3-torch) and 2.x. Weights are read and written as
safetensors with json + struct (safetensors_io.py beside this file); the tied head.weight is
tok_emb.weight, stored once under that name.
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

CODES = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16",
         torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8",
         torch.bool: "BOOL"}
DTYPES = {code: dtype for dtype, code in CODES.items()}


class GPT(nn.Module):
    """examples/gpt.h: tok_emb, pos_emb, blocks (pre-norm encoder layers under a causal mask),
    ln_f, head (weight tied to tok_emb.weight)."""

    def __init__(self, layers, d_model, heads, seq, vocab=256):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList([
            nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0,
                                       activation="gelu", batch_first=True, norm_first=True)
            for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok_emb.weight
        # torch 2.x: also tell the blocks the mask is causal, so that attention runs as
        # scaled_dot_product_attention(is_causal=True) (flash attention on a GPU; the same
        # function). bench/gpu/bench_gpt.py sets it; the CPU references keep the mask alone.
        self.causal_hint = False

    def forward(self, idx):
        t = idx.size(1)
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(t, device=idx.device))
        # float, -inf above the diagonal
        mask = nn.Transformer.generate_square_subsequent_mask(t).to(idx.device)
        hint = {"is_causal": True} if self.causal_hint else {}
        for block in self.blocks:
            x = block(x, src_mask=mask, **hint)
        return self.head(self.ln_f(x))


def gpt_init(model):
    """GPT-2 init, as examples::gpt_init: weights N(0, 0.02), biases 0, LayerNorm 1/0, drawn in
    named_parameters() order (the tied weight once)."""
    owners = {}
    for _, m in model.named_modules():
        for name, p in m.named_parameters(recurse=False):
            owners.setdefault(id(p), (m, name))
    with torch.no_grad():
        for _, p in model.named_parameters():
            m, name = owners[id(p)]
            if isinstance(m, nn.LayerNorm):
                p.fill_(1.0 if name == "weight" else 0.0)
            elif name == "bias" or name.endswith("_bias"):
                p.zero_()
            else:
                p.normal_(0.0, 0.02)


def gpt_batch(data, step, global_batch, seq):
    """examples/gpt_data.h with world 1: sequence j of step i starts at ((i*G + j)*T) mod
    (len - T - 1)."""
    starts = len(data) - seq - 1
    if starts <= 0:
        sys.exit("train_gpt_ref: the data has %d bytes, need more than seq + 1 = %d"
                 % (len(data), seq + 1))
    offsets = [((step * global_batch + j) * seq) % starts for j in range(global_batch)]
    inputs = torch.tensor([list(data[o:o + seq]) for o in offsets], dtype=torch.int64)
    targets = torch.tensor([list(data[o + 1:o + seq + 1]) for o in offsets], dtype=torch.int64)
    return inputs, targets


def tensor_bytes(t):
    """Raw little-endian bytes, without numpy (a torch 2.x venv may lack it)."""
    flat = t.detach().contiguous().cpu().reshape(-1)
    return bytes(flat.view(torch.uint8).tolist())


def save(path, model, metadata):
    entries = [(name, CODES[p.dtype], list(p.shape), tensor_bytes(p))
               for name, p in model.named_parameters()]  # head.weight is tok_emb.weight: once
    safetensors_io.write(path, entries, metadata)


def load(path, model):
    entries, _ = safetensors_io.read(path)
    tensors = {}
    for name, code, shape, raw in entries:
        if safetensors_io.numel(shape) == 0:
            tensors[name] = torch.empty(shape, dtype=DTYPES[code])
        else:
            tensors[name] = torch.frombuffer(bytearray(raw), dtype=DTYPES[code]).reshape(shape)
    if "head.weight" not in tensors:
        tensors["head.weight"] = tensors["tok_emb.weight"]
    model.load_state_dict(tensors, strict=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8, help="the global batch")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--optimizer", choices=["sgd", "adamw"], default="adamw")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", help="training bytes")
    ap.add_argument("--load", help="initial weights (safetensors)")
    ap.add_argument("--save-init", help="write torch-initialised weights (safetensors) and exit")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = GPT(a.layers, a.d_model, a.heads, a.seq)
    gpt_init(model)
    if a.save_init:
        save(a.save_init, model, {"format": "pt", "generator": "train_gpt_ref.py",
                                  "torch_version": torch.__version__, "seed": str(a.seed)})
        print("wrote", a.save_init)
        return
    if a.load:
        load(a.load, model)
    if not a.data:
        ap.error("--data is required to train")
    with open(a.data, "rb") as f:
        data = f.read()
    if a.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=0.01)
    for step in range(a.steps):
        inputs, targets = gpt_batch(data, step, a.batch, a.seq)
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print("step %d loss %.8g" % (step, loss.item()), flush=True)


if __name__ == "__main__":
    main()
