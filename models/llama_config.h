// transformers' LlamaConfig (5.24), which also reads the configs of the models built the same way:
// Mistral (a sliding window), Qwen2 (q/k/v biases, per-layer sliding windows) and Qwen3 (RMSNorm
// of each query and key head): defaults, the v5 rope_parameters and the legacy rope_theta +
// rope_scaling formats, and the fields that change the maths; other fields are kept for
// to_json().
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace fsdp::models {

// rope_parameters: "default", "linear" (inv_freq / factor) or "llama3" (frequency bands).
struct RopeParameters {
  std::string rope_type = "default";
  double rope_theta = 10000.0;
  double factor = 1.0;                                   // linear, llama3
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  std::int64_t original_max_position_embeddings = 8192;  // llama3
};

class ConfigFields;

// One rope object ({"rope_type", "rope_theta", ...}) of `f`'s config, checked and standardised in
// place (llama3's original_max_position_embeddings filled in); `field` names it in errors
// ("rope_parameters", "rope_parameters.full_attention").
RopeParameters read_rope_object(nlohmann::json& rope, const ConfigFields& f,
                                const std::string& field, std::int64_t max_position_embeddings);
// rope_parameters of `f`'s config in v5's format, as transformers' convert_rope_params_to_dict
// makes it from the legacy rope_scaling and rope_theta (which leave the fields), checked.
RopeParameters read_rope_parameters(ConfigFields& f, std::int64_t max_position_embeddings);
// `p` into a rope object as save_pretrained writes it (other keys kept).
void write_rope_object(nlohmann::json& rope, const RopeParameters& p);

struct LlamaConfig {
  std::string model_type = "llama";  // or "mistral", "qwen2", "qwen3"
  std::int64_t vocab_size = 32000, hidden_size = 4096, intermediate_size = 11008;
  std::int64_t num_hidden_layers = 32, num_attention_heads = 32, num_key_value_heads = 32;
  std::int64_t head_dim = 128;  // null in the file: hidden_size / num_attention_heads
  std::int64_t max_position_embeddings = 2048;
  std::string hidden_act = "silu";
  double rms_norm_eps = 1e-6, initializer_range = 0.02, attention_dropout = 0.0;
  RopeParameters rope;
  bool attention_bias = false;  // q_proj, k_proj and v_proj's (Qwen2: always)
  bool o_proj_bias = false;     // Llama and Qwen3: attention_bias; Qwen2: none
  bool mlp_bias = false, tie_word_embeddings = false;
  bool qk_norm = false;                        // Qwen3: RMSNorm over each q and k head
  std::optional<std::int64_t> pad_token_id;    // Embedding padding_idx
  std::optional<std::int64_t> sliding_window;  // keys within this many positions
  // Qwen2/Qwen3's layer_types: "sliding_attention" layers use sliding_window, others attend in
  // full. Empty: every layer uses sliding_window (Mistral's; none for Llama).
  std::vector<std::string> layer_types;
  nlohmann::json fields;  // every field, as read (defaults filled in)

  // The window of layer `layer` (nullopt: full causal attention).
  std::optional<std::int64_t> window_of(std::int64_t layer) const;
  // transformers' prefix of the model's class names: "Llama", "Mistral", "Qwen2", "Qwen3".
  std::string family() const;

  // From a parsed config.json (LlamaConfig's, MistralConfig's, Qwen2Config's or Qwen3Config's
  // defaults by its model_type); `source`
  // names it in errors. Unsupported values are InputErrors naming the field and value.
  static LlamaConfig from_json(const nlohmann::json& file, const std::string& source);
  // As save_pretrained writes it: every field sorted, rope in the v5 rope_parameters format.
  nlohmann::json to_json(const std::string& dtype = "float32") const;
};

}  // namespace fsdp::models
