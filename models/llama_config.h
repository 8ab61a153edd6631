// transformers' LlamaConfig (5.24), which also reads Mistral configs (with their sliding window):
// defaults, the v5 rope_parameters and the legacy rope_theta + rope_scaling formats, and the
// fields that change LlamaForCausalLM's maths; other fields are kept for to_json().
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace fsdp::models {

// rope_parameters: "default", "linear" (inv_freq / factor) or "llama3" (frequency bands).
struct RopeParameters {
  std::string rope_type = "default";
  double rope_theta = 10000.0;
  double factor = 1.0;                                   // linear, llama3
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  std::int64_t original_max_position_embeddings = 8192;  // llama3
};

struct LlamaConfig {
  std::string model_type = "llama";  // or "mistral"
  std::int64_t vocab_size = 32000, hidden_size = 4096, intermediate_size = 11008;
  std::int64_t num_hidden_layers = 32, num_attention_heads = 32, num_key_value_heads = 32;
  std::int64_t head_dim = 128;  // null in the file: hidden_size / num_attention_heads
  std::int64_t max_position_embeddings = 2048;
  std::string hidden_act = "silu";
  double rms_norm_eps = 1e-6, initializer_range = 0.02, attention_dropout = 0.0;
  RopeParameters rope;
  bool attention_bias = false, mlp_bias = false, tie_word_embeddings = false;
  std::optional<std::int64_t> pad_token_id;    // Embedding padding_idx
  std::optional<std::int64_t> sliding_window;  // Mistral: keys within this many positions
  nlohmann::json fields;                       // every field, as read (defaults filled in)

  // From a parsed config.json ("llama" or "mistral" defaults by its model_type); `source`
  // names it in errors. Unsupported values are InputErrors naming the field and value.
  static LlamaConfig from_json(const nlohmann::json& file, const std::string& source);
  // As save_pretrained writes it: every field sorted, rope in the v5 rope_parameters format.
  nlohmann::json to_json(const std::string& dtype = "float32") const;
};

}  // namespace fsdp::models
