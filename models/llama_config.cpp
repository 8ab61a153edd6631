#include "models/llama_config.h"

#include <fmt/format.h>

#include "models/activation.h"
#include "models/config_fields.h"

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

RopeParameters read_rope(ConfigFields& f, std::int64_t max_position_embeddings) {
  nlohmann::json rope = rope_object(f);
  ConfigFields r(rope, nlohmann::json::object(), f.source() + ": rope_parameters");
  RopeParameters p;
  p.rope_type = r.string("rope_type");
  p.rope_theta = r.number("rope_theta");
  if (p.rope_type != "default" && p.rope_type != "linear" && p.rope_type != "llama3")
    f.unsupported("rope_parameters.rope_type", p.rope_type, "supported: default, linear, llama3");
  const auto required = [&](const char* key) {
    if (!rope.contains(key))
      f.fail(fmt::format("rope_parameters.{} is missing (rope_type \"{}\" needs it)", key,
                         p.rope_type));
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
      f.fail(fmt::format("rope_parameters.high_freq_factor {} must exceed low_freq_factor {}",
                         p.high_freq_factor, p.low_freq_factor));
  }
  f.json()["rope_parameters"] = rope;
  return p;
}

}  // namespace

LlamaConfig LlamaConfig::from_json(const nlohmann::json& file, const std::string& source) {
  const bool mistral = file.is_object() && file.value("model_type", "") == "mistral";
  ConfigFields f(file, mistral ? mistral_defaults() : llama_defaults(), source);
  LlamaConfig c;
  c.model_type = mistral ? "mistral" : "llama";
  c.vocab_size = f.positive("vocab_size");
  c.hidden_size = f.positive("hidden_size");
  c.intermediate_size = f.positive("intermediate_size");
  c.num_hidden_layers = f.positive("num_hidden_layers");
  c.num_attention_heads = f.positive("num_attention_heads");
  if (f.is_null("num_key_value_heads")) f.json()["num_key_value_heads"] = c.num_attention_heads;
  c.num_key_value_heads = f.positive("num_key_value_heads");
  if (c.hidden_size % c.num_attention_heads != 0)
    f.fail(fmt::format("hidden_size {} is not divisible by num_attention_heads {}", c.hidden_size,
                       c.num_attention_heads));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    f.fail(fmt::format("num_attention_heads {} is not divisible by num_key_value_heads {}",
                       c.num_attention_heads, c.num_key_value_heads));
  if (f.is_null("head_dim")) f.json()["head_dim"] = c.hidden_size / c.num_attention_heads;
  c.head_dim = f.positive("head_dim");
  if (c.head_dim % 2 != 0)
    f.unsupported("head_dim", c.head_dim, "rotary embeddings need an even head_dim");
  c.max_position_embeddings = f.positive("max_position_embeddings");
  c.hidden_act = f.string("hidden_act");
  if (!is_supported_activation(c.hidden_act)) {
    std::string names;
    for (const auto& n : supported_activations()) names += (names.empty() ? "" : ", ") + n;
    f.unsupported("hidden_act", c.hidden_act, "supported: " + names);
  }
  c.rms_norm_eps = f.number("rms_norm_eps");
  c.initializer_range = f.number("initializer_range");
  c.attention_dropout = f.number("attention_dropout");
  if (c.attention_dropout < 0 || c.attention_dropout > 1)
    f.fail(fmt::format("attention_dropout must be in [0, 1], got {}", c.attention_dropout));
  if (!mistral) {  // MistralConfig has no biases
    c.attention_bias = f.boolean("attention_bias");
    c.mlp_bias = f.boolean("mlp_bias");
  }
  c.tie_word_embeddings = f.boolean("tie_word_embeddings");
  f.token_ids("eos_token_id");  // checked here, read by generation
  c.pad_token_id = f.optional_integer("pad_token_id");
  if (c.pad_token_id && (*c.pad_token_id < 0 || *c.pad_token_id >= c.vocab_size))
    f.fail(fmt::format("pad_token_id {} is outside the vocabulary [0, {})", *c.pad_token_id,
                       c.vocab_size));
  if (mistral) {
    c.sliding_window = f.optional_integer("sliding_window");
    if (c.sliding_window && *c.sliding_window <= 0)
      f.fail(fmt::format("sliding_window must be positive or null, got {}", *c.sliding_window));
  } else if (!f.is_null("sliding_window")) {
    // transformers' Llama forward ignores it, but its generate builds a cache that drops keys
    // outside it: no one meaning to follow.
    f.unsupported("sliding_window", f.json()["sliding_window"],
                  "only full attention; set it to null");
  }
  c.rope = read_rope(f, c.max_position_embeddings);
  c.fields = f.json();
  return c;
}

nlohmann::json LlamaConfig::to_json(const std::string& dtype) const {
  nlohmann::json j = fields.is_object() ? fields : llama_defaults();
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim;
  j["max_position_embeddings"] = max_position_embeddings;
  j["hidden_act"] = hidden_act;
  j["rms_norm_eps"] = rms_norm_eps;
  j["initializer_range"] = initializer_range;
  j["attention_dropout"] = attention_dropout;
  if (model_type != "mistral") {
    j["attention_bias"] = attention_bias;
    j["mlp_bias"] = mlp_bias;
  } else {
    j["sliding_window"] =
        sliding_window ? nlohmann::json(*sliding_window) : nlohmann::json(nullptr);
  }
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["pad_token_id"] = pad_token_id ? nlohmann::json(*pad_token_id) : nlohmann::json(nullptr);
  nlohmann::json rope = j.value("rope_parameters", nlohmann::json::object());
  rope["rope_type"] = this->rope.rope_type;
  rope["rope_theta"] = this->rope.rope_theta;
  if (this->rope.rope_type != "default") rope["factor"] = this->rope.factor;
  if (this->rope.rope_type == "llama3") {
    rope["low_freq_factor"] = this->rope.low_freq_factor;
    rope["high_freq_factor"] = this->rope.high_freq_factor;
    rope["original_max_position_embeddings"] = this->rope.original_max_position_embeddings;
  }
  j["rope_parameters"] = rope;
  return saved_config(j, model_type == "mistral" ? "MistralForCausalLM" : "LlamaForCausalLM",
                      model_type, dtype);
}

}  // namespace fsdp::models
