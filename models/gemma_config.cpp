#include "models/gemma_config.h"

#include <fmt/format.h>

#include "models/config_fields.h"
#include "models/decoder_config.h"

namespace fsdp::models {

namespace {

// Gemma3TextConfig().to_dict() of transformers 5.24, less the PretrainedConfig bookkeeping that
// save_pretrained does not write. layer_types null stands for the list __post_init__ derives,
// rope_parameters null for the per-layer-type defaults.
const nlohmann::json& gemma3_defaults() {
  static const nlohmann::json d = nlohmann::json::parse(R"({
    "attention_bias": false, "attention_dropout": 0.0, "attn_logit_softcapping": null,
    "bos_token_id": 2, "eos_token_id": 1, "final_logit_softcapping": null, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304, "initializer_range": 0.02,
    "intermediate_size": 9216, "layer_types": null, "max_position_embeddings": 131072,
    "num_attention_heads": 8, "num_hidden_layers": 26, "num_key_value_heads": 4,
    "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
    "rope_parameters": null, "sliding_window": 4096, "tie_word_embeddings": true,
    "use_bidirectional_attention": false, "use_cache": true, "vocab_size": 262208})");
  return d;
}

// Gemma2Config().to_dict() of transformers 5.24, as above.
const nlohmann::json& gemma2_defaults() {
  static const nlohmann::json d = nlohmann::json::parse(R"({
    "attention_bias": false, "attention_dropout": 0.0, "attn_logit_softcapping": 50.0,
    "bos_token_id": 2, "eos_token_id": 1, "final_logit_softcapping": 30.0, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304, "initializer_range": 0.02,
    "intermediate_size": 9216, "layer_types": null, "max_position_embeddings": 8192,
    "num_attention_heads": 8, "num_hidden_layers": 26, "num_key_value_heads": 4,
    "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
    "sliding_window": 4096, "tie_word_embeddings": true, "use_bidirectional_attention": null,
    "use_cache": true, "vocab_size": 256000})");
  return d;
}

constexpr const char* kFull = "full_attention";
constexpr const char* kSliding = "sliding_attention";

// layer_types as given, or as __post_init__ derives them: every sliding_window_pattern-th layer
// (1-based) full, the others sliding. Gemma 3 also writes the pattern back as
// "_sliding_window_pattern" (the file's sliding_window_pattern, else 6); Gemma 2's pattern is 2.
void read_gemma_layer_types(ConfigFields& f, const nlohmann::json& file, GemmaConfig& c) {
  auto& j = f.json();
  const bool gemma3 = c.model_type == "gemma3_text";
  const nlohmann::json pattern =
      gemma3 ? file.value("sliding_window_pattern", nlohmann::json(6)) : nlohmann::json(2);
  if (gemma3 && !file.contains("_sliding_window_pattern")) j["_sliding_window_pattern"] = pattern;
  auto& types = j["layer_types"];
  if (types.is_null()) {
    if (!pattern.is_number_integer() || pattern.get<std::int64_t>() <= 0)
      f.fail(
          fmt::format("sliding_window_pattern must be a positive integer, got {}", pattern.dump()));
    const std::int64_t every = pattern.get<std::int64_t>();
    types = nlohmann::json::array();
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i)
      types.push_back((i + 1) % every != 0 ? kSliding : kFull);
  }
  c.layer_types = read_layer_types(f, types, c.num_hidden_layers);
}

// rope_parameters keyed by layer type, as Gemma3TextConfig.convert_rope_params_to_dict makes it:
// a legacy rope_scaling updates full_attention's; a top-level rope_theta fills in
// full_attention's theta (else 1e6), rope_local_base_freq sliding_attention's (else 1e4).
void read_rope(ConfigFields& f, GemmaConfig& c) {
  auto& j = f.json();
  const auto given = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  nlohmann::json rope = given("rope_parameters") ? j["rope_parameters"] : nlohmann::json::object();
  if (!rope.is_object())
    f.fail(fmt::format("rope_parameters must be an object, got {}", rope.dump()));
  for (const auto& [key, value] : rope.items())
    if (key != kFull && key != kSliding)
      f.unsupported("rope_parameters", nlohmann::json(key),
                    "Gemma 3 keys its rope parameters by layer type: full_attention, "
                    "sliding_attention");
  for (const char* type : {kFull, kSliding}) {
    if (!rope.contains(type) || rope[type].is_null()) rope[type] = {{"rope_type", "default"}};
    if (!rope[type].is_object())
      f.fail(fmt::format("rope_parameters.{} must be an object, got {}", type, rope[type].dump()));
  }
  if (given("rope_scaling")) {
    if (!j["rope_scaling"].is_object())
      f.fail(fmt::format("rope_scaling must be an object, got {}", j["rope_scaling"].dump()));
    rope[kFull].update(j["rope_scaling"]);
  }
  const auto theta = [&](const char* type, const char* key, double fallback) {
    if (!rope[type].contains("rope_theta"))
      rope[type]["rope_theta"] = given(key) ? j[key] : nlohmann::json(fallback);
  };
  theta(kFull, "rope_theta", 1e6);
  theta(kSliding, "rope_local_base_freq", 1e4);
  for (const char* type : {kFull, kSliding}) {
    auto& r = rope[type];
    if (!r.contains("rope_type") && r.contains("type")) r["rope_type"] = r["type"];
    if (!r.contains("rope_type")) r["rope_type"] = "default";
  }
  c.full_rope = read_rope_object(rope[kFull], f, std::string("rope_parameters.") + kFull,
                                 c.max_position_embeddings);
  c.sliding_rope = read_rope_object(rope[kSliding], f, std::string("rope_parameters.") + kSliding,
                                    c.max_position_embeddings);
  for (const char* key : {"rope_scaling", "rope_theta", "rope_local_base_freq"}) j.erase(key);
  j["rope_parameters"] = rope;
}

// A softcap: null or a positive number.
std::optional<double> softcap(const ConfigFields& f, const std::string& key) {
  if (f.is_null(key)) return std::nullopt;
  const double c = f.number(key);
  if (!(c > 0)) f.fail(fmt::format("{} must be positive or null, got {}", key, c));
  return c;
}

}  // namespace

std::optional<std::int64_t> GemmaConfig::window_of(std::int64_t layer) const {
  if (layer < 0 || layer >= std::int64_t(layer_types.size())) return std::nullopt;
  return layer_types[std::size_t(layer)] == kSliding ? sliding_window : std::nullopt;
}

const RopeParameters& GemmaConfig::rope_of(const std::string& layer_type) const {
  return layer_type == kSliding ? sliding_rope : full_rope;
}

GemmaConfig GemmaConfig::from_json(const nlohmann::json& file, const std::string& source) {
  GemmaConfig c;
  if (file.is_object() && file.value("model_type", nlohmann::json()) == "gemma2")
    c.model_type = "gemma2";
  ConfigFields f(file, c.model_type == "gemma2" ? gemma2_defaults() : gemma3_defaults(), source);
  read_decoder_sizes(f, c);
  c.head_dim = f.positive("head_dim");
  read_decoder_numbers(f, c, "hidden_activation", &GemmaConfig::hidden_activation);
  c.query_pre_attn_scalar = f.number("query_pre_attn_scalar");
  if (!(c.query_pre_attn_scalar > 0))
    f.fail(fmt::format("query_pre_attn_scalar must be positive, got {}", c.query_pre_attn_scalar));
  c.attention_bias = f.boolean("attention_bias");
  read_decoder_tokens(f, c);
  if (!f.is_null("use_bidirectional_attention") && f.boolean("use_bidirectional_attention"))
    f.unsupported("use_bidirectional_attention", true, "only causal attention");
  c.sliding_window = read_sliding_window(f);
  read_gemma_layer_types(f, file, c);
  for (const auto& t : c.layer_types)
    if (t == kSliding && !c.sliding_window)
      f.fail("sliding_window is null but layer_types has sliding_attention layers");
  c.final_logit_softcapping = softcap(f, "final_logit_softcapping");
  const auto attention = softcap(f, "attn_logit_softcapping");  // Gemma 3's does not apply it
  if (c.model_type == "gemma2") {
    c.attention_softcap = attention;
    c.full_rope = c.sliding_rope = read_rope_parameters(f, c.max_position_embeddings);
  } else {
    read_rope(f, c);
  }
  c.fields = f.json();
  return c;
}

nlohmann::json GemmaConfig::to_json(const std::string& dtype) const {
  nlohmann::json j = fields.is_object()
                         ? fields
                         : (model_type == "gemma2" ? gemma2_defaults() : gemma3_defaults());
  write_decoder_fields(j, *this, "hidden_activation", &GemmaConfig::hidden_activation);
  j["head_dim"] = head_dim;
  j["attention_bias"] = attention_bias;
  j["sliding_window"] = sliding_window ? nlohmann::json(*sliding_window) : nlohmann::json(nullptr);
  j["final_logit_softcapping"] =
      final_logit_softcapping ? nlohmann::json(*final_logit_softcapping) : nlohmann::json(nullptr);
  if (model_type == "gemma2")
    j["attn_logit_softcapping"] =
        attention_softcap ? nlohmann::json(*attention_softcap) : nlohmann::json(nullptr);
  nlohmann::json rope = j.value("rope_parameters", nlohmann::json::object());
  if (!rope.is_object()) rope = nlohmann::json::object();
  if (rope_per_layer_type()) {
    for (const char* type : {kFull, kSliding}) {
      if (!rope[type].is_object()) rope[type] = nlohmann::json::object();
      write_rope_object(rope[type], rope_of(type));
    }
  } else {
    write_rope_object(rope, full_rope);
  }
  j["rope_parameters"] = rope;
  return saved_config(j, architecture(), model_type, dtype);
}

}  // namespace fsdp::models
