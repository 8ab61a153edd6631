#!/usr/bin/env python3
"""Regenerates tests/fixtures/finetune/ for tests/examples/test_finetune.py: tiny models made by
transformers (GPT-2 with a tied head, Llama with grouped-query attention and an untied head,
Qwen2 with its q/k/v biases and a tied head, Qwen3 with q_norm and k_norm, Gemma 3 with sliding and
full layers, Gemma 2 with its softcaps; no dropout, so training is deterministic), llm.c token files (uint16, GPT-2's header) and
transformers' per-step losses for finetune's runs (finetune_ref.py beside this file: the same data
order, torch's optimizers, the global batch). Run with /opt/torch2/bin/python (transformers).

    /opt/torch2/bin/python tools/torch_reference/make_finetune_fixtures.py [--only NAME ...]

--only writes just those models' directories and replaces just their runs in expected.json, in
the models' order (the token files and the other models' files stay as they are; every model is
still built in order, so each one's initial weights are the same either way: --only llama
rewrites llama's files and expected.json byte for byte).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig,
                          GPT2Config, GPT2LMHeadModel,
                          LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "tests", "fixtures", "finetune")
VOCAB = 96
# The runs the test repeats: global batch 4 (1 rank x 4 or 2 ranks x 2), T 16, 6 steps.
RUNS = [
    {"optimizer": "adamw", "lr": 3e-3},  # torch's AdamW defaults: weight decay 0.01
    {"optimizer": "sgd", "lr": 0.3, "weight_decay": 0.01},
    {"optimizer": "adamw", "lr": 3e-3, "weight_decay": 0.0, "clip_grad_norm": 0.5},
]
SEQ, BATCH, STEPS, EVAL_BATCHES = 16, 4, 6, 2


def models():
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0))
    llama = LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2))
    # Built after the two above, so that theirs stay as they were.
    qwen2 = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        tie_word_embeddings=True, bos_token_id=1, eos_token_id=2))
    qwen3 = Qwen3ForCausalLM(Qwen3Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2))
    # Gemma 3: layers sliding, full, sliding with a window shorter than the sequence, the full
    # layer's rope_theta with linear scaling, the sliding ones' rope_local_base_freq, GQA,
    # query_pre_attn_scalar != head_dim, the tied head.
    gemma3 = Gemma3ForCausalLM(Gemma3TextConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
        sliding_window=6, sliding_window_pattern=2, rope_theta=10000.0,
        rope_local_base_freq=100.0, rope_scaling={"rope_type": "linear", "factor": 4.0},
        query_pre_attn_scalar=24, pad_token_id=0, bos_token_id=2, eos_token_id=1))
    # Gemma 2: both softcaps small enough to bite in training, layers sliding, full, sliding
    # with a window shorter than the sequence, an untied head.
    gemma2 = Gemma2ForCausalLM(Gemma2Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
        sliding_window=6, query_pre_attn_scalar=24, attn_logit_softcapping=3.0,
        final_logit_softcapping=5.0, tie_word_embeddings=False, pad_token_id=0, bos_token_id=2,
        eos_token_id=1))
    return {"gpt2": gpt2, "llama": llama, "qwen2": qwen2, "qwen3": qwen3, "gemma3": gemma3,
            "gemma2": gemma2}


def write_tokens(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, 1, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="+", default=[])
    only = parser.parse_args().only
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(7)
    # Learnable: a repeating pattern with noise.
    base = rng.integers(0, VOCAB, size=37)
    for name, n in (("train", 3000), ("val", 800)):
        toks = base[np.arange(n) % len(base)].copy()
        noise = rng.random(n) < 0.2
        toks[noise] = rng.integers(0, VOCAB, size=int(noise.sum()))
        if not only:
            write_tokens(os.path.join(OUT, f"{name}.bin"), toks)
    expected = {"seq": SEQ, "global_batch": BATCH, "steps": STEPS, "eval_batches": EVAL_BATCHES,
                "runs": []}
    if only:
        with open(os.path.join(OUT, "expected.json")) as f:
            expected = json.load(f)
        expected["runs"] = [r for r in expected["runs"] if r["model"] not in only]
    built = models()
    unknown = set(only) - set(built)
    if unknown:
        sys.exit(f"unknown models {sorted(unknown)} (known: {list(built)})")
    for name, model in built.items():
        if only and name not in only:
            continue
        model.save_pretrained(os.path.join(OUT, name))
        for run in RUNS:
            cmd = [sys.executable, os.path.join(HERE, "finetune_ref.py"),
                   "--model-dir", os.path.join(OUT, name),
                   "--data", os.path.join(OUT, "train.bin"),
                   "--eval-data", os.path.join(OUT, "val.bin"),
                   "--eval-batches", str(EVAL_BATCHES), "--seq", str(SEQ),
                   "--batch", str(BATCH), "--steps", str(STEPS),
                   "--optimizer", run["optimizer"], "--lr", str(run["lr"])]
            if "weight_decay" in run:
                cmd += ["--weight-decay", str(run["weight_decay"])]
            if "clip_grad_norm" in run:
                cmd += ["--clip-grad-norm", str(run["clip_grad_norm"])]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            losses = [float(l.split()[3]) for l in out.splitlines() if l.startswith("step ")]
            held = [l for l in out.splitlines() if l.startswith("held-out")][0].split()
            expected["runs"].append(dict(run, model=name, losses=losses,
                                         eval_before=float(held[3]), eval_after=float(held[5])))
    # The models' order (a stable sort: each model's runs in RUNS' order), as a full run writes it.
    expected["runs"].sort(key=lambda r: list(built).index(r["model"]))
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
