#!/usr/bin/env python3
"""Regenerates tests/fixtures/hf_models/ for tests/models/: tiny random GPT-2, Llama, Mistral, Qwen2,
Qwen3, Gemma 3 (text) and Gemma 2 models built with transformers (5.24) from configs, saved with save_pretrained (config.json,
model.safetensors), plus expected.safetensors per model:
  input_ids [2, 9] int64 and logits [2, 9, V] float32 of the model in eval mode;
  prompt_ids [1, 4] int64 and greedy_ids [1, 4 + N] int64: generate(do_sample=False,
  max_new_tokens=N) with the cache, transformers' defaults otherwise;
  eos_prompt_ids [2, 4] (prompt_ids and another that never meets the EOS) and eos_greedy_ids:
  the same with greedy_ids' third new token as EOS, so the first row finishes and is padded
  (with config.json's pad_token_id; EOS where null) while the second runs on;
  Llama and Mistral: inv_freq [head_dim / 2] float32, the rotary embedding's inverse frequencies
  (Gemma 3: full_attention_inv_freq and sliding_attention_inv_freq, one per layer type);
  long_prompt_ids [1, max_position_embeddings - 3] and long_greedy_ids: greedy generate past
  max_position_embeddings, with max_new_tokens=N for Llama (no position table: transformers
  caps the length there only when max_new_tokens is not given) and 4 for GPT-2 (the most its
  position table allows: n_positions + 1 in all).

    /opt/torch2/bin/python tools/torch_reference/make_hf_model_fixtures.py [NAME ...]

With names, only those fixtures are written (each model's seed is its place in MODELS, so the
others' files stay as they are).

Weights: transformers' init with initializer_range 0.2 (logits far from ties, so greedy argmax
does not flip on rounding), then every parameter (norm weights and biases included) perturbed by
N(0, 0.1), so each one changes the logits.
"""
import os
import shutil
import sys

import torch
from safetensors.torch import save_file
from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig,
                          GPT2Config, GPT2LMHeadModel,
                          LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "tests", "fixtures", "hf_models")
NEW_TOKENS = 10

MODELS = {
    "gpt2_tied": (GPT2Config, GPT2LMHeadModel, dict(
        vocab_size=101, n_positions=32, n_embd=32, n_layer=2, n_head=4, bos_token_id=100,
        eos_token_id=100, initializer_range=0.2)),
    "gpt2_gelu_untied": (GPT2Config, GPT2LMHeadModel, dict(
        vocab_size=97, n_positions=24, n_embd=24, n_layer=2, n_head=3, n_inner=40,
        activation_function="gelu", scale_attn_by_inverse_layer_idx=True,
        layer_norm_epsilon=1e-4, tie_word_embeddings=False, bos_token_id=96, eos_token_id=96,
        initializer_range=0.2)),
    "llama_gqa": (LlamaConfig, LlamaForCausalLM, dict(
        vocab_size=113, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        rms_norm_eps=1e-5, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        initializer_range=0.2)),
    "llama_tied_bias_llama3": (LlamaConfig, LlamaForCausalLM, dict(
        vocab_size=107, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
        tie_word_embeddings=True, attention_bias=True, mlp_bias=True, bos_token_id=1,
        eos_token_id=2, initializer_range=0.2,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 16})),
    "llama_linear_head_dim": (LlamaConfig, LlamaForCausalLM, dict(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, head_dim=12, max_position_embeddings=64,
        hidden_act="silu", bos_token_id=1, eos_token_id=2, initializer_range=0.2,
        rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0})),
    # A window shorter than the inputs and the generated sequences, so that it masks keys.
    "mistral_sliding_window": (MistralConfig, MistralForCausalLM, dict(
        vocab_size=103, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        sliding_window=4, bos_token_id=1, eos_token_id=2, initializer_range=0.2)),
    # Qwen2.5's shape: q/k/v biases, o_proj none, a tied head; layer 1 slides (max_window_layers
    # 1) with a window shorter than the inputs, layer 0 attends in full.
    "qwen2_tied_window": (Qwen2Config, Qwen2ForCausalLM, dict(
        vocab_size=109, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        tie_word_embeddings=True, use_sliding_window=True, sliding_window=4,
        max_window_layers=1, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        bos_token_id=1, eos_token_id=2, initializer_range=0.2)),
    # Qwen3's: q_norm and k_norm over a head_dim other than hidden_size / heads, all four
    # attention biases.
    "qwen3_qk_norm": (Qwen3Config, Qwen3ForCausalLM, dict(
        vocab_size=111, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
        attention_bias=True, bos_token_id=1, eos_token_id=2, initializer_range=0.2)),
    # Gemma 3 (text) in the legacy form of the hub's config.json files: layers sliding, full,
    # sliding (sliding_window_pattern 2) with a window shorter than the inputs; the full layer's
    # rope_theta with linear scaling (the 4B's factor 8), the sliding layers' own
    # rope_local_base_freq; GQA; head_dim != hidden_size / heads; query_pre_attn_scalar !=
    # head_dim; the tied head.
    "gemma3_sliding_rope": (Gemma3TextConfig, Gemma3ForCausalLM, dict(
        vocab_size=127, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=12, max_position_embeddings=64,
        sliding_window=4, sliding_window_pattern=2, rope_theta=10000.0,
        rope_local_base_freq=100.0, rope_scaling={"rope_type": "linear", "factor": 8.0},
        query_pre_attn_scalar=16, pad_token_id=0, bos_token_id=2, eos_token_id=1,
        initializer_range=0.2)),
    # Gemma 3 with its optional parts: final_logit_softcapping (tanh on the logits), an untied
    # head, all four attention biases, attn_logit_softcapping set (which Gemma 3's attention
    # does not apply), explicit layer_types and rope_parameters, no pad token.
    "gemma3_softcap_untied": (Gemma3TextConfig, Gemma3ForCausalLM, dict(
        vocab_size=113, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, head_dim=8, max_position_embeddings=64,
        sliding_window=3, layer_types=["full_attention", "sliding_attention"],
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 5000.0},
                         "sliding_attention": {"rope_type": "linear", "rope_theta": 100.0,
                                               "factor": 2.0}},
        final_logit_softcapping=3.0, attn_logit_softcapping=1.0, attention_bias=True,
        tie_word_embeddings=False, pad_token_id=None, bos_token_id=2, eos_token_id=1,
        initializer_range=0.2)),
    # Gemma 2: both softcaps small enough to bite (the attention's through transformers' eager
    # attention, its only one for Gemma 2), layers sliding, full, sliding (its default pattern)
    # with a window shorter than the inputs, GQA, head_dim != hidden_size / heads,
    # query_pre_attn_scalar != head_dim, the legacy rope_theta, an untied head.
    "gemma2_softcap": (Gemma2Config, Gemma2ForCausalLM, dict(
        vocab_size=109, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=12, max_position_embeddings=64,
        sliding_window=4, query_pre_attn_scalar=16, attn_logit_softcapping=2.0,
        final_logit_softcapping=3.0, rope_theta=1000.0, tie_word_embeddings=False,
        pad_token_id=0, bos_token_id=2, eos_token_id=1, initializer_range=0.2)),
}


def main(names):
    unknown = set(names) - set(MODELS)
    if unknown:
        sys.exit(f"unknown fixtures {sorted(unknown)} (known: {list(MODELS)})")
    for index, (name, (config_cls, model_cls, kwargs)) in enumerate(MODELS.items()):
        if names and name not in names:
            continue
        torch.manual_seed(index)
        config = config_cls(**kwargs)
        model = model_cls(config).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))
        out = os.path.join(OUT, name)
        shutil.rmtree(out, ignore_errors=True)
        model.save_pretrained(out)
        os.remove(os.path.join(out, "generation_config.json"))  # not read by the tests
        ids = torch.randint(0, config.vocab_size, (2, 9))
        prompt = torch.randint(3, config.vocab_size - 1, (1, 4))
        with torch.no_grad():
            logits = model(ids).logits
            greedy = model.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS,
                                    pad_token_id=config.eos_token_id)
        expected = {"input_ids": ids, "logits": logits.contiguous(), "prompt_ids": prompt,
                    "greedy_ids": greedy}
        if hasattr(model, "model"):
            rotary = model.model.rotary_emb
            for layer_type in getattr(rotary, "layer_types", []):  # Gemma 3's, per layer type
                expected[f"{layer_type}_inv_freq"] = getattr(
                    rotary, f"{layer_type}_inv_freq").contiguous()
            if hasattr(rotary, "inv_freq"):
                expected["inv_freq"] = rotary.inv_freq.contiguous()
        # A prompt ending 3 positions before the config's maximum, continued past it: Llama's
        # by N tokens; GPT-2's by the 4 that its position table allows (the last token is
        # never fed back, so the sequence may be n_positions + 1 long).
        positions = config.max_position_embeddings
        long_prompt = torch.randint(3, config.vocab_size - 1, (1, positions - 3))
        with torch.no_grad():
            expected["long_greedy_ids"] = model.generate(
                long_prompt, do_sample=False,
                max_new_tokens=4 if hasattr(model, "transformer") else NEW_TOKENS,
                pad_token_id=config.eos_token_id)
        expected["long_prompt_ids"] = long_prompt
        # Two rows, the first ending at its third new token (given as EOS): finished rows are
        # padded with the generation config's pad_token_id (config.json's; EOS where null).
        # The second row is drawn until its greedy path does not meet that EOS.
        eos = int(greedy[0, 6])
        for _ in range(100):
            rows = torch.cat([prompt, torch.randint(3, config.vocab_size - 1, (1, 4))])
            with torch.no_grad():
                padded = model.generate(rows, attention_mask=torch.ones_like(rows),
                                        do_sample=False, max_new_tokens=NEW_TOKENS,
                                        eos_token_id=eos)
            if padded.size(1) == 4 + NEW_TOKENS and eos not in padded[1, 4:].tolist():
                break
        expected["eos_greedy_ids"] = padded
        expected["eos_prompt_ids"] = rows
        save_file(expected, os.path.join(out, "expected.safetensors"))
        print(name, "logits", tuple(logits.shape), "greedy", greedy.tolist())


if __name__ == "__main__":
    main(sys.argv[1:])
