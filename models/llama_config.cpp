#include "models/llama_config.h"

#include <fmt/format.h>

#include "models/config_fields.h"
#include "models/decoder_config.h"

namespace fsdp::models {

namespace {

// LlamaConfig().to_dict() / MistralConfig().to_dict() of transformers 5.24, less the
// PretrainedConfig bookkeeping that save_pretrained does not write. head_dim null stands for
// hidden_size / num_attention_heads, num_key_value_heads null for num_attention_heads.
const nlohmann::json& llama_defaults() {
  static const nlohmann::json d = nlohmann::json::parse(R"({
    "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
    "head_dim": null, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 11008, "max_position_embeddings": 2048, "mlp_bias": false,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": null,
    "pad_token_id": null, "pretraining_tp": 1, "rms_norm_eps": 1e-06,
    "tie_word_embeddings": false, "use_cache": true, "vocab_size": 32000})");
  return d;
}

const nlohmann::json& mistral_defaults() {
  static const nlohmann::json d = nlohmann::json::parse(R"({
    "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "head_dim": null,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 131072, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "pad_token_id": null,
    "rms_norm_eps": 1e-06, "sliding_window": 4096, "tie_word_embeddings": false,
    "use_cache": true, "vocab_size": 32000})");
  return d;
}

// Qwen2Config().to_dict() / Qwen3Config().to_dict() of transformers 5.24, as above. Their
// sliding_window is kept only with use_sliding_window (null otherwise), and layer_types null stands
// for the list their __post_init__ derives.
const nlohmann::json& qwen2_defaults() {
  static const nlohmann::json d = nlohmann::json::parse(R"({
    "attention_dropout": 0.0, "bos_token_id": null, "eos_token_id": null, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 22016,
    "layer_types": null, "max_position_embeddings": 32768, "max_window_layers": 28,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "pad_token_id": null, "rms_norm_eps": 1e-06, "sliding_window": 4096,
    "tie_word_embeddings": false, "use_cache": true, "use_sliding_window": false,
    "vocab_size": 151936})");
  return d;
}

const nlohmann::json& qwen3_defaults() {
  static const nlohmann::json d = [] {
    nlohmann::json q = qwen2_defaults();
    q["attention_bias"] = false;
    q["head_dim"] = 128;
    return q;
  }();
  return d;
}

const nlohmann::json& defaults_of(const std::string& model_type) {
  if (model_type == "mistral") return mistral_defaults();
  if (model_type == "qwen2") return qwen2_defaults();
  if (model_type == "qwen3") return qwen3_defaults();
  return llama_defaults();
}

// Qwen2/Qwen3's windows: sliding_window only with use_sliding_window, and layer_types (given, or
// "sliding_attention" from max_window_layers on where there is a window), as their __post_init__.
void read_qwen_windows(ConfigFields& f, LlamaConfig& c) {
  if (!f.boolean("use_sliding_window")) f.json()["sliding_window"] = nullptr;
  c.sliding_window = read_sliding_window(f);
  const std::int64_t from = f.optional_integer("max_window_layers").value_or(0);
  auto& types = f.json()["layer_types"];
  if (types.is_null()) {
    types = nlohmann::json::array();
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i)
      types.push_back(c.sliding_window && i >= from ? "sliding_attention" : "full_attention");
  }
  c.layer_types = read_layer_types(f, types, c.num_hidden_layers);
}

}  // namespace

std::optional<std::int64_t> LlamaConfig::window_of(std::int64_t layer) const {
  if (layer_types.empty()) return sliding_window;
  if (layer < 0 || layer >= std::int64_t(layer_types.size())) return std::nullopt;
  return layer_types[std::size_t(layer)] == "sliding_attention" ? sliding_window : std::nullopt;
}

std::string LlamaConfig::family() const {
  if (model_type == "mistral") return "Mistral";
  if (model_type == "qwen2") return "Qwen2";
  if (model_type == "qwen3") return "Qwen3";
  return "Llama";
}

namespace {

// The rope object in v5's format, as transformers' convert_rope_params_to_dict makes it: the
// legacy rope_scaling ({"type" | "rope_type", ...}) where given and not empty, else
// rope_parameters; a top-level rope_theta fills in only a theta the object lacks.
nlohmann::json rope_object(ConfigFields& f) {
  auto& j = f.json();
  const auto given = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  const bool scaling = given("rope_scaling") && j["rope_scaling"] != nlohmann::json::object();
  const char* source = scaling ? "rope_scaling" : "rope_parameters";
  nlohmann::json rope = given(source) ? j[source] : nlohmann::json::object();
  if (!rope.is_object()) f.fail(fmt::format("{} must be an object, got {}", source, rope.dump()));
  if (!rope.contains("rope_theta") && given("rope_theta")) rope["rope_theta"] = j["rope_theta"];
  // A legacy "type" names rope_type; transformers keeps the key too (and writes it back).
  if (!rope.contains("rope_type") && rope.contains("type")) rope["rope_type"] = rope["type"];
  if (!rope.contains("rope_type")) rope["rope_type"] = "default";
  if (!rope.contains("rope_theta")) rope["rope_theta"] = 10000.0;
  j.erase("rope_scaling");
  j.erase("rope_theta");
  return rope;
}

}  // namespace

RopeParameters read_rope_parameters(ConfigFields& f, std::int64_t max_position_embeddings) {
  nlohmann::json rope = rope_object(f);
  const RopeParameters p = read_rope_object(rope, f, "rope_parameters", max_position_embeddings);
  f.json()["rope_parameters"] = rope;
  return p;
}

RopeParameters read_rope_object(nlohmann::json& rope, const ConfigFields& f,
                                const std::string& field, std::int64_t max_position_embeddings) {
  ConfigFields r(rope, nlohmann::json::object(), f.source() + ": " + field);
  RopeParameters p;
  p.rope_type = r.string("rope_type");
  p.rope_theta = r.number("rope_theta");
  if (p.rope_type != "default" && p.rope_type != "linear" && p.rope_type != "llama3")
    f.unsupported(field + ".rope_type", p.rope_type, "supported: default, linear, llama3");
  const auto required = [&](const char* key) {
    if (!rope.contains(key))
      f.fail(fmt::format("{}.{} is missing (rope_type \"{}\" needs it)", field, key, p.rope_type));
    return r.number(key);
  };
  if (p.rope_type != "default") p.factor = required("factor");
  if (p.rope_type == "llama3") {
    p.low_freq_factor = required("low_freq_factor");
    p.high_freq_factor = required("high_freq_factor");
    if (!rope.contains("original_max_position_embeddings"))
      rope["original_max_position_embeddings"] = max_position_embeddings;  // standardize
    p.original_max_position_embeddings =
        ConfigFields(rope, {}, r.source()).positive("original_max_position_embeddings");
    if (p.high_freq_factor <= p.low_freq_factor)
      f.fail(fmt::format("{}.high_freq_factor {} must exceed low_freq_factor {}", field,
                         p.high_freq_factor, p.low_freq_factor));
  }
  return p;
}

void write_rope_object(nlohmann::json& rope, const RopeParameters& p) {
  // A number the object holds with this value keeps its form (the hub's "rope_theta": 1000000
  // stays an integer, as transformers writes it back).
  const auto set = [&](const char* key, double value) {
    if (!rope.contains(key) || !rope[key].is_number() || rope[key].get<double>() != value)
      rope[key] = value;
  };
  rope["rope_type"] = p.rope_type;
  set("rope_theta", p.rope_theta);
  if (p.rope_type != "default") set("factor", p.factor);
  if (p.rope_type == "llama3") {
    set("low_freq_factor", p.low_freq_factor);
    set("high_freq_factor", p.high_freq_factor);
    rope["original_max_position_embeddings"] = p.original_max_position_embeddings;
  }
}

LlamaConfig LlamaConfig::from_json(const nlohmann::json& file, const std::string& source) {
  LlamaConfig c;
  if (file.is_object() && file.contains("model_type") && file["model_type"].is_string())
    c.model_type = file["model_type"].get<std::string>();
  if (c.model_type != "mistral" && c.model_type != "qwen2" && c.model_type != "qwen3")
    c.model_type = "llama";
  const bool mistral = c.model_type == "mistral";
  const bool qwen = c.model_type == "qwen2" || c.model_type == "qwen3";
  ConfigFields f(file, defaults_of(c.model_type), source);
  // num_key_value_heads null stands for num_attention_heads (read and checked first).
  if (f.is_null("num_key_value_heads"))
    f.json()["num_key_value_heads"] = f.json().value("num_attention_heads", nlohmann::json());
  read_decoder_sizes(f, c);
  // Qwen2Config has no head_dim: its attention takes one the file gives, else hidden / heads
  // (and save_pretrained writes none).
  if (!f.json().contains("head_dim")) {
    c.head_dim = c.hidden_size / c.num_attention_heads;
  } else {
    if (f.is_null("head_dim")) f.json()["head_dim"] = c.hidden_size / c.num_attention_heads;
    c.head_dim = f.positive("head_dim");
  }
  read_decoder_numbers(f, c, "hidden_act", &LlamaConfig::hidden_act);
  if (c.model_type == "llama" || c.model_type == "qwen3") {  // the others have no such fields
    c.attention_bias = c.o_proj_bias = f.boolean("attention_bias");
    if (c.model_type == "llama") c.mlp_bias = f.boolean("mlp_bias");
  }
  if (c.model_type == "qwen2") c.attention_bias = true;  // q, k and v; o_proj has none
  c.qk_norm = c.model_type == "qwen3";
  read_decoder_tokens(f, c);
  if (qwen) {
    read_qwen_windows(f, c);
  } else if (mistral) {
    c.sliding_window = read_sliding_window(f);
  } else if (!f.is_null("sliding_window")) {
    // transformers' Llama forward ignores it, but its generate builds a cache that drops keys
    // outside it: no one meaning to follow.
    f.unsupported("sliding_window", f.json()["sliding_window"],
                  "only full attention; set it to null");
  }
  c.rope = read_rope_parameters(f, c.max_position_embeddings);
  c.fields = f.json();
  return c;
}

nlohmann::json LlamaConfig::to_json(const std::string& dtype) const {
  nlohmann::json j = fields.is_object() ? fields : defaults_of(model_type);
  write_decoder_fields(j, *this, "hidden_act", &LlamaConfig::hidden_act);
  if (model_type != "qwen2" || j.contains("head_dim")) j["head_dim"] = head_dim;
  if (model_type == "llama" || model_type == "qwen3") j["attention_bias"] = o_proj_bias;
  if (model_type == "llama") j["mlp_bias"] = mlp_bias;
  if (model_type != "llama")
    j["sliding_window"] =
        sliding_window ? nlohmann::json(*sliding_window) : nlohmann::json(nullptr);
  nlohmann::json rope = j.value("rope_parameters", nlohmann::json::object());
  write_rope_object(rope, this->rope);
  j["rope_parameters"] = rope;
  return saved_config(j, family() + "ForCausalLM", model_type, dtype);
}

}  // namespace fsdp::models
