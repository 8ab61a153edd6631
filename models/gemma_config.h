// transformers' Gemma3TextConfig (5.24; model_type "gemma3_text", Gemma3ForCausalLM) and
// Gemma2Config ("gemma2", Gemma2ForCausalLM): their defaults, the layer types their __post_init__
// derives (Gemma 3: from sliding_window_pattern; Gemma 2: every other layer sliding), the rope
// parameters (Gemma 3's per layer type: full_attention from rope_theta and rope_scaling,
// sliding_attention from rope_local_base_freq; Gemma 2's one set, as Llama's), the softcaps, and
// the fields that change the maths; other fields are kept for to_json().
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/llama_config.h"

namespace fsdp::models {

struct GemmaConfig {
  std::string model_type = "gemma3_text";  // or "gemma2"
  std::int64_t vocab_size = 262208, hidden_size = 2304, intermediate_size = 9216;
  std::int64_t num_hidden_layers = 26, num_attention_heads = 8, num_key_value_heads = 4;
  std::int64_t head_dim = 256, max_position_embeddings = 131072;
  std::string hidden_activation = "gelu_pytorch_tanh";
  double rms_norm_eps = 1e-6, initializer_range = 0.02, attention_dropout = 0.0;
  double query_pre_attn_scalar = 256;  // attention scale: query_pre_attn_scalar ** -0.5
  bool attention_bias = false;         // q, k, v and o_proj's
  bool tie_word_embeddings = true;
  std::optional<std::int64_t> pad_token_id = 0;
  std::optional<std::int64_t> sliding_window = 4096;
  // Each layer's "full_attention" or "sliding_attention" (num_hidden_layers entries).
  std::vector<std::string> layer_types;
  // Gemma 3: rope_parameters.full_attention and .sliding_attention; Gemma 2: both its one set.
  RopeParameters full_rope, sliding_rope;
  // tanh(logits / c) * c on the final logits.
  std::optional<double> final_logit_softcapping;
  // tanh(scores / c) * c on the attention scores: Gemma 2's attn_logit_softcapping. (Gemma 3
  // keeps the field in its config but its attention never applies it: none here, the field only
  // written back.)
  std::optional<double> attention_softcap;
  nlohmann::json fields;  // every field, as read (defaults filled in)

  // The window of layer `layer` (nullopt: full causal attention).
  std::optional<std::int64_t> window_of(std::int64_t layer) const;
  // The rope parameters of a layer type.
  const RopeParameters& rope_of(const std::string& layer_type) const;
  // Gemma 3: rope parameters (and rotary buffers) per layer type; Gemma 2: one set.
  bool rope_per_layer_type() const { return model_type == "gemma3_text"; }
  // Gemma 3: q_norm and k_norm.
  bool qk_norm() const { return model_type == "gemma3_text"; }
  // transformers' prefix of the model's class names: "Gemma3", "Gemma2".
  std::string family() const { return model_type == "gemma2" ? "Gemma2" : "Gemma3"; }
  // transformers' class name of the decoder: "Gemma3TextModel", "Gemma2Model".
  std::string body_class() const { return family() + (qk_norm() ? "TextModel" : "Model"); }
  // transformers' class name of the model: "Gemma3ForCausalLM", "Gemma2ForCausalLM".
  std::string architecture() const { return family() + "ForCausalLM"; }

  // From a parsed config.json; `source` names it in errors. Unsupported values are InputErrors
  // naming the field and value.
  static GemmaConfig from_json(const nlohmann::json& file, const std::string& source);
  // As save_pretrained writes it: every field sorted, rope_parameters per layer type.
  nlohmann::json to_json(const std::string& dtype = "float32") const;
};

}  // namespace fsdp::models
