#!/opt/torch2/bin/python
"""Writes the fixtures of fsdp-plan's Hugging Face config input (tests/tools/test_plan_config.py)
with transformers (5.24, /opt/torch2):

* tiny configs that the committed ones do not cover (tests/fixtures/hf_configs/<name>/config.json,
  written by transformers' save_pretrained): Llama tied with attention and MLP biases and a
  head_dim other than hidden_size / heads, Mistral, GPT-2 untied with n_inner and exact GELU;
* for each config, tests/fixtures/models/hf/<name>.json: transformers'
  AutoModelForCausalLM.from_config(config) built on the meta device in float32 (fsdp-plan builds
  a config in float32 whatever its dtype says) and exported by tools/export_torch_model.py.

`fsdp-plan <config.json>` must print exactly the plan of `fsdp-plan <name>.json`.
Run: /opt/torch2/bin/python tests/tools/gen_hf_plan_fixtures.py [NAME ...]
(with names, only those exports are written, and no config).
"""
import os
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM, GPT2Config, LlamaConfig, MistralConfig

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
sys.path.insert(0, os.path.join(ROOT, "tools"))
from export_torch_model import write_model  # noqa: E402

# name -> the config class and its fields, for the configs written here.
NEW_CONFIGS = {
    "llama_tied_bias": (LlamaConfig, dict(
        vocab_size=80, hidden_size=24, intermediate_size=40, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=1, head_dim=8, attention_bias=True,
        mlp_bias=True, tie_word_embeddings=True, max_position_embeddings=64,
        rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})),
    "mistral_tiny": (MistralConfig, dict(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, sliding_window=None,
        max_position_embeddings=128)),
    "gpt2_untied": (GPT2Config, dict(
        vocab_size=70, n_embd=24, n_layer=3, n_head=3, n_inner=40, n_positions=48,
        activation_function="gelu", tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)),
}

# name -> its config.json, relative to tests/fixtures.
CONFIGS = {
    "finetune_gpt2": "finetune/gpt2/config.json",
    "finetune_llama": "finetune/llama/config.json",
    "finetune_gemma3": "finetune/gemma3/config.json",
    "finetune_gemma2": "finetune/gemma2/config.json",
    "gpt2": "hf_configs/gpt2/config.json",
    "llama3_70b": "hf_configs/llama3_70b/config.json",
    "gemma3_1b": "hf_configs/gemma3_1b/config.json",  # the hub's form of Gemma 3 1B's
    **{name: f"hf_configs/{name}/config.json" for name in NEW_CONFIGS},
}


def main(names):
    if not names:
        for name, (cls, fields) in NEW_CONFIGS.items():
            cls(**fields).save_pretrained(os.path.join(FIXTURES, "hf_configs", name))
    out = os.path.join(FIXTURES, "models", "hf")
    os.makedirs(out, exist_ok=True)
    for name, config in CONFIGS.items():
        if names and name not in names:
            continue
        cfg = AutoConfig.from_pretrained(os.path.join(FIXTURES, config))
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        write_model(model, os.path.join(out, name + ".json"))
        print(name, type(model).__name__, sum(p.numel() for p in model.parameters()))


if __name__ == "__main__":
    main(sys.argv[1:])
