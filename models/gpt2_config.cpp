#include "models/gpt2_config.h"

#include <fmt/format.h>

#include "models/config_fields.h"

namespace fsdp::models {

namespace {

// GPT2Config().to_dict() of transformers 5.24, less the PretrainedConfig bookkeeping that
// save_pretrained does not write.
const nlohmann::json& defaults() {
  static const nlohmann::json d = nlohmann::json::parse(R"({
    "activation_function": "gelu_new", "add_cross_attention": false, "attn_pdrop": 0.1,
    "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "n_embd": 768, "n_head": 12, "n_inner": null, "n_layer": 12,
    "n_positions": 1024, "pad_token_id": null, "reorder_and_upcast_attn": false,
    "resid_pdrop": 0.1, "scale_attn_by_inverse_layer_idx": false, "scale_attn_weights": true,
    "summary_activation": null, "summary_first_dropout": 0.1, "summary_proj_to_labels": true,
    "summary_type": "cls_index", "summary_use_proj": true, "tie_word_embeddings": true,
    "use_cache": true, "vocab_size": 50257})");
  return d;
}

}  // namespace

GPT2Config GPT2Config::from_json(const nlohmann::json& file, const std::string& source) {
  ConfigFields f(file, defaults(), source,
                 {{"hidden_size", "n_embd"},
                  {"max_position_embeddings", "n_positions"},
                  {"num_attention_heads", "n_head"},
                  {"num_hidden_layers", "n_layer"}});
  GPT2Config c;
  c.vocab_size = f.positive("vocab_size");
  c.n_positions = f.positive("n_positions");
  c.n_embd = f.positive("n_embd");
  c.n_layer = f.positive("n_layer");
  c.n_head = f.positive("n_head");
  c.n_inner = f.optional_integer("n_inner");
  if (c.n_inner && *c.n_inner <= 0)
    f.fail(fmt::format("n_inner must be positive or null, got {}", *c.n_inner));
  c.activation_function = f.activation("activation_function");
  c.resid_pdrop = f.number("resid_pdrop");
  c.embd_pdrop = f.number("embd_pdrop");
  c.attn_pdrop = f.number("attn_pdrop");
  c.layer_norm_epsilon = f.number("layer_norm_epsilon");
  c.initializer_range = f.number("initializer_range");
  c.scale_attn_weights = f.boolean("scale_attn_weights");
  c.scale_attn_by_inverse_layer_idx = f.boolean("scale_attn_by_inverse_layer_idx");
  c.reorder_and_upcast_attn = f.boolean("reorder_and_upcast_attn");
  c.tie_word_embeddings = f.boolean("tie_word_embeddings");
  f.token_ids("eos_token_id");  // checked here, read by generation
  f.optional_integer("pad_token_id");
  if (f.boolean("add_cross_attention"))
    f.unsupported("add_cross_attention", true, "GPT2LMHeadModel here has no cross-attention");
  if (c.n_embd % c.n_head != 0)
    f.fail(fmt::format("n_embd {} is not divisible by n_head {}", c.n_embd, c.n_head));
  for (const char* p : {"resid_pdrop", "embd_pdrop", "attn_pdrop"})
    if (f.number(p) < 0 || f.number(p) > 1)
      f.fail(fmt::format("{} must be in [0, 1], got {}", p, f.json()[p].dump()));
  c.fields = f.json();
  return c;
}

nlohmann::json GPT2Config::to_json(const std::string& dtype) const {
  nlohmann::json j = fields.is_object() ? fields : defaults();
  j["vocab_size"] = vocab_size;
  j["n_positions"] = n_positions;
  j["n_embd"] = n_embd;
  j["n_layer"] = n_layer;
  j["n_head"] = n_head;
  j["n_inner"] = n_inner ? nlohmann::json(*n_inner) : nlohmann::json(nullptr);
  j["activation_function"] = activation_function;
  j["resid_pdrop"] = resid_pdrop;
  j["embd_pdrop"] = embd_pdrop;
  j["attn_pdrop"] = attn_pdrop;
  j["layer_norm_epsilon"] = layer_norm_epsilon;
  j["initializer_range"] = initializer_range;
  j["scale_attn_weights"] = scale_attn_weights;
  j["scale_attn_by_inverse_layer_idx"] = scale_attn_by_inverse_layer_idx;
  j["reorder_and_upcast_attn"] = reorder_and_upcast_attn;
  j["tie_word_embeddings"] = tie_word_embeddings;
  return saved_config(j, "GPT2LMHeadModel", "gpt2", dtype);
}

}  // namespace fsdp::models
