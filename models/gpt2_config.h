// transformers' GPT2Config (5.24): its defaults, attribute aliases and the fields that change
// GPT2LMHeadModel's maths; other fields are kept as read, so to_json() writes them back.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace fsdp::models {

struct GPT2Config {
  std::int64_t vocab_size = 50257, n_positions = 1024, n_embd = 768, n_layer = 12, n_head = 12;
  std::optional<std::int64_t> n_inner;  // null: 4 * n_embd
  std::string activation_function = "gelu_new";
  double resid_pdrop = 0.1, embd_pdrop = 0.1, attn_pdrop = 0.1;
  double layer_norm_epsilon = 1e-5, initializer_range = 0.02;
  bool scale_attn_weights = true, scale_attn_by_inverse_layer_idx = false;
  bool reorder_and_upcast_attn = false;  // eager attention only; in float32 rounding only
  bool tie_word_embeddings = true;
  nlohmann::json fields;  // every field, as read (defaults filled in)

  // From a parsed config.json; `source` names it in errors. Unsupported values (cross
  // attention, an unknown activation, n_embd % n_head != 0) are InputErrors.
  static GPT2Config from_json(const nlohmann::json& file, const std::string& source);
  // As save_pretrained writes it: every field, sorted, with architectures, model_type, dtype.
  nlohmann::json to_json(const std::string& dtype = "float32") const;

  std::int64_t inner_dim() const { return n_inner ? *n_inner : 4 * n_embd; }
  std::int64_t head_dim() const { return n_embd / n_head; }
};

}  // namespace fsdp::models
