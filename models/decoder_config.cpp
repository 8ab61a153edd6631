#include "models/decoder_config.h"

#include <fmt/format.h>

#include <utility>

#include "models/config_fields.h"
#include "models/gemma_config.h"
#include "models/llama_config.h"

namespace fsdp::models {

template <class Config>
void read_decoder_sizes(const ConfigFields& f, Config& c) {
  for (const auto& [key, size] : {std::pair{"vocab_size", &Config::vocab_size},
                                  {"hidden_size", &Config::hidden_size},
                                  {"intermediate_size", &Config::intermediate_size},
                                  {"num_hidden_layers", &Config::num_hidden_layers},
                                  {"num_attention_heads", &Config::num_attention_heads},
                                  {"num_key_value_heads", &Config::num_key_value_heads}})
    c.*size = f.positive(key);
  // Gemma3TextConfig.validate_architecture asks this too, although head_dim is its own field.
  if (c.hidden_size % c.num_attention_heads != 0)
    f.fail(fmt::format("hidden_size {} is not divisible by num_attention_heads {}", c.hidden_size,
                       c.num_attention_heads));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    f.fail(fmt::format("num_attention_heads {} is not divisible by num_key_value_heads {}",
                       c.num_attention_heads, c.num_key_value_heads));
}

template <class Config>
void read_decoder_numbers(const ConfigFields& f, Config& c, const std::string& activation_key,
                          std::string Config::*activation) {
  if (c.head_dim % 2 != 0)
    f.unsupported("head_dim", c.head_dim, "rotary embeddings need an even head_dim");
  c.max_position_embeddings = f.positive("max_position_embeddings");
  c.*activation = f.activation(activation_key);
  c.rms_norm_eps = f.number("rms_norm_eps");
  c.initializer_range = f.number("initializer_range");
  c.attention_dropout = f.number("attention_dropout");
  if (c.attention_dropout < 0 || c.attention_dropout > 1)
    f.fail(fmt::format("attention_dropout must be in [0, 1], got {}", c.attention_dropout));
}

template <class Config>
void read_decoder_tokens(const ConfigFields& f, Config& c) {
  c.tie_word_embeddings = f.boolean("tie_word_embeddings");
  f.token_ids("eos_token_id");  // checked here, read by generation
  c.pad_token_id = f.optional_integer("pad_token_id");
  if (c.pad_token_id && (*c.pad_token_id < 0 || *c.pad_token_id >= c.vocab_size))
    f.fail(fmt::format("pad_token_id {} is outside the vocabulary [0, {})", *c.pad_token_id,
                       c.vocab_size));
}

std::optional<std::int64_t> read_sliding_window(const ConfigFields& f) {
  const std::optional<std::int64_t> window = f.optional_integer("sliding_window");
  if (window && *window <= 0)
    f.fail(fmt::format("sliding_window must be positive or null, got {}", *window));
  return window;
}

std::vector<std::string> read_layer_types(const ConfigFields& f, const nlohmann::json& types,
                                          std::int64_t num_hidden_layers) {
  if (!types.is_array() || std::int64_t(types.size()) != num_hidden_layers)
    f.fail(fmt::format("layer_types must be a list of num_hidden_layers ({}) entries, got {}",
                       num_hidden_layers, types.dump()));
  std::vector<std::string> out;
  for (const auto& t : types) {
    if (t != "full_attention" && t != "sliding_attention")
      f.unsupported("layer_types", t, "supported: full_attention, sliding_attention");
    out.push_back(t.get<std::string>());
  }
  return out;
}

template <class Config>
void write_decoder_fields(nlohmann::json& j, const Config& c, const std::string& activation_key,
                          std::string Config::*activation) {
  for (const auto& [key, size] : {std::pair{"vocab_size", &Config::vocab_size},
                                  {"hidden_size", &Config::hidden_size},
                                  {"intermediate_size", &Config::intermediate_size},
                                  {"num_hidden_layers", &Config::num_hidden_layers},
                                  {"num_attention_heads", &Config::num_attention_heads},
                                  {"num_key_value_heads", &Config::num_key_value_heads},
                                  {"max_position_embeddings", &Config::max_position_embeddings}})
    j[key] = c.*size;
  j[activation_key] = c.*activation;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["initializer_range"] = c.initializer_range;
  j["attention_dropout"] = c.attention_dropout;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["pad_token_id"] = c.pad_token_id ? nlohmann::json(*c.pad_token_id) : nlohmann::json(nullptr);
  if (!c.layer_types.empty()) j["layer_types"] = c.layer_types;
}

// The two configs that share these fields.
template void read_decoder_sizes(const ConfigFields&, LlamaConfig&);
template void read_decoder_sizes(const ConfigFields&, GemmaConfig&);
template void read_decoder_numbers(const ConfigFields&, LlamaConfig&, const std::string&,
                                   std::string LlamaConfig::*);
template void read_decoder_numbers(const ConfigFields&, GemmaConfig&, const std::string&,
                                   std::string GemmaConfig::*);
template void read_decoder_tokens(const ConfigFields&, LlamaConfig&);
template void read_decoder_tokens(const ConfigFields&, GemmaConfig&);
template void write_decoder_fields(nlohmann::json&, const LlamaConfig&, const std::string&,
                                   std::string LlamaConfig::*);
template void write_decoder_fields(nlohmann::json&, const GemmaConfig&, const std::string&,
                                   std::string GemmaConfig::*);

}  // namespace fsdp::models
