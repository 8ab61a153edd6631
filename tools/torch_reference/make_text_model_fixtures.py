#!/usr/bin/env python3
"""Regenerates tests/fixtures/text_models/ for the user's path of issue 26 (tokenize, finetune,
generate text): tiny random GPT-2 (tied head) and Llama (GQA) models whose vocabularies are the
fixture tokenizers' (tests/fixtures/tokenizers/), saved with save_pretrained, each with
  tokenizer.json   a symbolic link to its fixture tokenizer (a model directory carries its
                   tokenizer, as on the hub)
  expected.json    transformers' greedy continuation of PROMPT: the prompt's ids as
                   tokenizer(PROMPT) gives them (special tokens added), generate(do_sample=False,
                   max_new_tokens=NEW_TOKENS)'s ids, and tokenizer.decode of them (with and without
                   skip_special_tokens); for GPT-2 also with the Llama-style tokenizer, whose
                   966 ids are fewer than the model's 1257 (decode leaves the others out).

    /opt/torch2/bin/python tools/torch_reference/make_text_model_fixtures.py

Weights as make_hf_model_fixtures.py makes them: initializer_range 0.2, then every parameter
perturbed by N(0, 0.1), so greedy argmax is far from ties.
"""
import json
import os
import shutil

import torch
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                          PreTrainedTokenizerFast)

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "..", "tests", "fixtures")
OUT = os.path.join(FIXTURES, "text_models")
PROMPT = "The quick brown fox"
NEW_TOKENS = 12

# name: (tokenizer fixture, config class, model class, config without the vocabulary's size)
MODELS = {
    "gpt2": ("gpt2_style", GPT2Config, GPT2LMHeadModel, dict(
        n_positions=64, n_embd=16, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0,
        initializer_range=0.2)),
    "llama": ("llama3_style", LlamaConfig, LlamaForCausalLM, dict(
        hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, bos_token_id=0, eos_token_id=1,
        initializer_range=0.2)),
}


def vocab_size(tokenizer_json):
    """One more than the largest id of the model's vocabulary and the added tokens."""
    t = json.load(open(tokenizer_json, encoding="utf-8"))
    ids = list(t["model"]["vocab"].values()) + [a["id"] for a in t["added_tokens"]]
    return max(ids) + 1


def main():
    for index, (name, (tok_name, config_cls, model_cls, kwargs)) in enumerate(MODELS.items()):
        tok_file = os.path.join(FIXTURES, "tokenizers", tok_name, "tokenizer.json")
        tokenizer = PreTrainedTokenizerFast(tokenizer_file=tok_file)
        torch.manual_seed(100 + index)
        config = config_cls(vocab_size=vocab_size(tok_file), **kwargs)
        model = model_cls(config).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))
        out = os.path.join(OUT, name)
        shutil.rmtree(out, ignore_errors=True)
        model.save_pretrained(out)
        os.chmod(os.path.join(out, "model.safetensors"), 0o644)
        os.remove(os.path.join(out, "generation_config.json"))  # the config's ids suffice
        os.symlink(os.path.join("..", "..", "tokenizers", tok_name, "tokenizer.json"),
                   os.path.join(out, "tokenizer.json"))
        prompt = tokenizer(PROMPT, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            greedy = model.generate(prompt, attention_mask=torch.ones_like(prompt),
                                    do_sample=False, max_new_tokens=NEW_TOKENS,
                                    pad_token_id=config.eos_token_id)
        expected = {"prompt": PROMPT, "prompt_ids": prompt[0].tolist(),
                    "max_new_tokens": NEW_TOKENS, "greedy_ids": greedy[0].tolist(),
                    "greedy_text": tokenizer.decode(greedy[0]),
                    "greedy_text_skip_special": tokenizer.decode(greedy[0],
                                                                 skip_special_tokens=True)}
        if name == "gpt2":
            # A tokenizer with fewer ids than the model (as a vocabulary padded to 50304 for
            # GPT-2's 50257): decode leaves the ids of no token out.
            small = PreTrainedTokenizerFast(tokenizer_file=os.path.join(
                FIXTURES, "tokenizers", "llama3_style", "tokenizer.json"))
            p = small(PROMPT, return_tensors="pt")["input_ids"]
            with torch.no_grad():
                g = model.generate(p, attention_mask=torch.ones_like(p), do_sample=False,
                                   max_new_tokens=NEW_TOKENS, pad_token_id=config.eos_token_id)
            expected["smaller_tokenizer"] = {"tokenizer": "llama3_style", "vocab_size": len(small),
                                             "greedy_ids": g[0].tolist(),
                                             "greedy_text": small.decode(g[0])}
        with open(os.path.join(out, "expected.json"), "w", encoding="utf-8") as f:
            json.dump(expected, f, indent=2, ensure_ascii=False)
            f.write("\n")
        print(name, expected)


if __name__ == "__main__":
    main()
