// transformers' GPT2LMHeadModel: its module tree, class names and FQNs exactly (so state dicts
// load without renaming), the pre-LN forward of modeling_gpt2.py, and a KV cache.
//   GPT2LMHeadModel(transformer: GPT2Model(wte, wpe, drop, h: ModuleList of GPT2Block(ln_1,
//   attn: GPT2Attention(c_attn, c_proj: Conv1D, attn_dropout, resid_dropout), ln_2,
//   mlp: GPT2MLP(c_fc, c_proj, act, dropout)), ln_f), lm_head)
#pragma once

#include <cstdint>

#include "core/module.h"
#include "models/causal_lm.h"
#include "models/gpt2_config.h"

namespace fsdp::models {

// Calls: (x [B, S, E], layer_past=(k, v) | None) -> (out [B, S, E], (k, v)) with k, v
// [B, H, past+S, D] (the history and this call's).
class GPT2Attention : public nn::Module {
 public:
  GPT2Attention(const GPT2Config& config, std::int64_t layer_idx, TensorOptions options = {});
  nn::Value forward(const nn::Args& args) override;

  const std::int64_t heads, layer_idx;
  const double scale;  // D^-0.5 (scale_attn_weights) / (layer_idx + 1) (by_inverse_layer_idx)
};

// c_proj(act(c_fc(x))), then dropout.
class GPT2MLP : public nn::Module {
 public:
  GPT2MLP(const GPT2Config& config, TensorOptions options = {});
  nn::Value forward(const nn::Args& args) override;
};

// Calls: (h, layer_past=(k, v) | None, use_cache=false) -> h, or (h, (k, v)) with use_cache.
class GPT2Block : public nn::Module {
 public:
  GPT2Block(const GPT2Config& config, std::int64_t layer_idx, TensorOptions options = {});
  nn::Value forward(const nn::Args& args) override;
};

// Calls: (ids [B, S], past_key_values=((k, v), ...) | None, use_cache=false) -> hidden states
// after ln_f, or (hidden, ((k, v), ...)) with use_cache.
class GPT2Model : public nn::Module {
 public:
  GPT2Model(const GPT2Config& config, TensorOptions options = {});
  nn::Value forward(const nn::Args& args) override;

  const GPT2Config config;
};

// lm_head (Linear(E, V, bias=false)) holds transformer.wte's weight when tie_word_embeddings.
class GPT2LMHeadModel : public CausalLM {
 public:
  static const nn::ModuleClass& static_class();
  // options.device may be meta: shapes only, materialised later (to_empty + init_weights).
  explicit GPT2LMHeadModel(const GPT2Config& config, TensorOptions options = {});

  using CausalLM::forward;
  nlohmann::json config_json(const std::string& dtype = "float32") const override {
    return config.to_json(dtype);
  }
  void init_weights(nn::Module& module, Generator* generator = nullptr) const override;
  std::int64_t vocab_size() const override { return config.vocab_size; }
  std::int64_t max_positions() const override { return config.n_positions; }
  std::optional<std::int64_t> position_limit() const override { return config.n_positions; }

  const GPT2Config config;
};

}  // namespace fsdp::models
