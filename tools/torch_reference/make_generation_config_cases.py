#!/usr/bin/env python3
"""Regenerates tests/fixtures/generation_config_cases.json for tests/models/test_generation.cpp:
transformers' (5.24) greedy generate on fixture models of tests/fixtures/hf_models/ under a
generation config's repetition_penalty and max_length (with and without max_new_tokens), one
prompt of two rows each.

    /opt/torch2/bin/python tools/torch_reference/make_generation_config_cases.py
"""
import json
import os

import torch
from transformers import AutoModelForCausalLM, GenerationConfig

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "..", "tests", "fixtures")
CONFIGS = [  # (generation_config.json's fields, generate's own arguments)
    ({"repetition_penalty": 1.3}, {"max_new_tokens": 10}),
    ({"repetition_penalty": 0.7}, {"max_new_tokens": 10}),
    ({"repetition_penalty": 1.3, "do_sample": True, "temperature": 0.5}, {"max_new_tokens": 6}),
    ({"max_length": 9}, {}),
    ({"max_length": 9}, {"max_new_tokens": 3}),
    ({"max_length": 9, "repetition_penalty": 1.1}, {}),
]


def main():
    cases = []
    for name in ("llama_gqa", "gpt2_tied", "qwen2_tied_window"):
        model = AutoModelForCausalLM.from_pretrained(
            os.path.join(FIXTURES, "hf_models", name)).eval()
        config = model.config
        torch.manual_seed(3)
        prompt = torch.randint(3, config.vocab_size - 1, (2, 4))
        for fields, kwargs in CONFIGS:
            model.generation_config = GenerationConfig(
                bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                pad_token_id=config.eos_token_id, **fields)
            with torch.no_grad():
                # do_sample from the file is the caller's choice in ours: greedy here.
                out = model.generate(prompt, attention_mask=torch.ones_like(prompt),
                                     do_sample=False, **kwargs)
            cases.append({"model": name, "generation_config": fields, "generate": kwargs,
                          "pad_token_id": config.eos_token_id, "prompt": prompt.tolist(),
                          "output": out.tolist()})
            print(name, fields, kwargs, out.tolist())
    with open(os.path.join(FIXTURES, "generation_config_cases.json"), "w") as f:
        json.dump(cases, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
