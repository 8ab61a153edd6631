#include "models/gemma.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/nn/container.h"
#include "core/nn/init.h"
#include "core/nn/linear.h"
#include "core/ops.h"
#include "models/attention.h"
#include "models/init_weights.h"
#include "models/llama.h"
#include "models/rope.h"

namespace fsdp::models {

GemmaRMSNorm::GemmaRMSNorm(std::int64_t dim, double eps_, TensorOptions options,
                           const std::string& cls)
    : Module(hf_class(cls)), eps(eps_) {
  register_parameter("weight", empty({dim}, options.with_requires_grad(false)));
  reset_parameters();
}

Tensor GemmaRMSNorm::forward(const Tensor& x) {
  // (x * (1 + w)) in float32, then cast: Llama's casts x first (transformers PR 29402).
  const Tensor one_plus_w = add(to_dtype(param("weight"), DType::Float32), 1.0);
  return to_dtype(rms_norm(to_dtype(x, DType::Float32), one_plus_w, eps), x.dtype());
}

void GemmaRMSNorm::reset_parameters() {
  autograd::NoGradGuard no_grad;
  nn::init::zeros_(param("weight"));
}

std::string GemmaRMSNorm::extra_repr() const {
  return fmt::format("({},), eps={}", param("weight").size(0), eps);
}

Gemma3TextScaledWordEmbedding::Gemma3TextScaledWordEmbedding(
    std::int64_t num, std::int64_t dim, std::optional<std::int64_t> padding_idx, double scale,
    TensorOptions options)
    : nn::Embedding(hf_class("Gemma3TextScaledWordEmbedding", {"Embedding"}), num, dim,
                    nn::EmbeddingOptions{padding_idx, std::nullopt, 2.0, false, false, options}),
      embed_scale(scale) {}

Tensor Gemma3TextScaledWordEmbedding::forward(const Tensor& indices) {
  const Tensor rows = nn::Embedding::forward(indices);
  // The buffer is float32 (torch.tensor of a Python float), cast to the weight's dtype.
  const double scale =
      to_dtype(full({}, static_cast<float>(embed_scale), DType::Float32), rows.dtype()).item();
  return mul(rows, scale);
}

nn::ModulePtr Gemma3TextScaledWordEmbedding::clone_structure() const {
  return std::make_shared<Gemma3TextScaledWordEmbedding>(
      num_embeddings, embedding_dim, padding_idx, embed_scale, options().tensor.with_device(kMeta));
}

namespace {

std::vector<std::string> distinct_sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace

Gemma3RotaryEmbedding::Gemma3RotaryEmbedding(const GemmaConfig& c, TensorOptions options)
    : Module(hf_class(c.family() + "RotaryEmbedding")),
      config(c),
      layer_types(distinct_sorted(c.layer_types)) {
  const TensorOptions f32 = TensorOptions(DType::Float32, options.device);
  for (const auto& type : layer_types)
    for (const char* suffix : {"_inv_freq", "_original_inv_freq"})
      register_buffer(type + suffix, empty({c.head_dim / 2}, f32), /*persistent=*/false);
  reset_parameters();
}

void Gemma3RotaryEmbedding::reset_parameters() {
  autograd::NoGradGuard no_grad;
  for (const auto& type : layer_types) {
    const Tensor& inv = buffer(type + "_inv_freq");
    if (inv.is_meta()) continue;
    const Tensor values = rope_inv_freq(config.rope_of(type), config.head_dim);
    Tensor(inv).copy_(values);
    Tensor(buffer(type + "_original_inv_freq")).copy_(values);
  }
}

nn::Value Gemma3RotaryEmbedding::forward(const nn::Args& args) {
  const Tensor& x = args.tensor(0);
  const std::int64_t past = args.get(1, "past_length", std::int64_t{0}).to_int();
  const std::string type = args.get(2, "layer_type").str();
  FSDP_CHECK(std::count(layer_types.begin(), layer_types.end(), type) == 1, ValueError,
             "Gemma3RotaryEmbedding: no layer type '{}'", type);
  // The default and linear rope types' attention scaling is 1: cos and sin as they are.
  auto [cos, sin] = rotary_cos_sin(buffer(type + "_inv_freq"), past, x.size(1), x.dtype());
  return nn::Value(std::vector<nn::Value>{cos, sin});
}

Gemma3Attention::Gemma3Attention(const GemmaConfig& c, std::int64_t layer_idx_,
                                 TensorOptions options)
    : Module(hf_class(c.family() + "Attention")),
      heads(c.num_attention_heads),
      kv_heads(c.num_key_value_heads),
      head_dim(c.head_dim),
      layer_idx(layer_idx_),
      attention_dropout(c.attention_dropout),
      scale(std::pow(c.query_pre_attn_scalar, -0.5)),
      sliding_window(c.window_of(layer_idx_)) {
  const std::int64_t E = c.hidden_size, D = c.head_dim;
  const bool bias = c.attention_bias;
  register_module("q_proj", std::make_shared<nn::Linear>(E, heads * D, bias, options));
  register_module("k_proj", std::make_shared<nn::Linear>(E, kv_heads * D, bias, options));
  register_module("v_proj", std::make_shared<nn::Linear>(E, kv_heads * D, bias, options));
  register_module("o_proj", std::make_shared<nn::Linear>(heads * D, E, bias, options));
  for (const char* name : {"q_norm", "k_norm"})
    register_module(
        name, std::make_shared<GemmaRMSNorm>(D, c.rms_norm_eps, options, c.family() + "RMSNorm"));
}

nn::Value Gemma3Attention::forward(const nn::Args& args) {
  const Tensor& x = args.tensor(0);
  const Tensor& cos = args.get(1, "cos").tensor();
  const Tensor& sin = args.get(2, "sin").tensor();
  // Each head of q and k normalised (over head_dim) before RoPE.
  const auto heads_of = [&](const char* proj, const char* norm, std::int64_t n) {
    return apply_rotary(call_child(norm, split_heads(call_child(proj, x), n)), cos, sin);
  };
  const Tensor q = heads_of("q_proj", "q_norm", heads);
  const auto [k, v] =
      with_history(args.get(3, "layer_past"), heads_of("k_proj", "k_norm", kv_heads),
                   split_heads(call_child("v_proj", x), kv_heads));
  const double p = is_training() ? attention_dropout : 0.0;
  const Tensor out =
      call_child("o_proj", merge_heads(causal_attention(q, k, v, scale, p, sliding_window)));
  return nn::Value(std::vector<nn::Value>{out, nn::Value(std::vector<nn::Value>{k, v})});
}

Gemma3DecoderLayer::Gemma3DecoderLayer(const GemmaConfig& c, std::int64_t layer_idx,
                                       TensorOptions options)
    : Module(hf_class(c.family() + "DecoderLayer", {"GradientCheckpointingLayer"})) {
  register_module("self_attn", std::make_shared<Gemma3Attention>(c, layer_idx, options));
  register_module("mlp",
                  std::make_shared<LlamaMLP>(c.family() + "MLP", c.hidden_size, c.intermediate_size,
                                             false, c.hidden_activation, options));
  for (const char* name : {"input_layernorm", "post_attention_layernorm",
                           "pre_feedforward_layernorm", "post_feedforward_layernorm"})
    register_module(name, std::make_shared<GemmaRMSNorm>(c.hidden_size, c.rms_norm_eps, options,
                                                         c.family() + "RMSNorm"));
}

nn::Value Gemma3DecoderLayer::forward(const nn::Args& args) {
  const Tensor& h = args.tensor(0);
  const nn::Value attn =
      (*child("self_attn"))(nn::Args({call_child("input_layernorm", h), args.get(1, "cos"),
                                      args.get(2, "sin"), args.get(3, "layer_past")}));
  Tensor out = add(h, call_child("post_attention_layernorm", attn[0].tensor()));
  const Tensor mlp = call_child("mlp", call_child("pre_feedforward_layernorm", out));
  out = add(out, call_child("post_feedforward_layernorm", mlp));
  if (!args.get(4, "use_cache", false).to_bool()) return out;
  return nn::Value(std::vector<nn::Value>{out, attn[1]});
}

Gemma3TextModel::Gemma3TextModel(const GemmaConfig& c, TensorOptions options)
    : Module(
          hf_class(c.family() + "TextModel", {c.family() + "PreTrainedModel", "PreTrainedModel"})),
      config(c) {
  register_module("embed_tokens", std::make_shared<Gemma3TextScaledWordEmbedding>(
                                      c.vocab_size, c.hidden_size, c.pad_token_id,
                                      std::sqrt(static_cast<double>(c.hidden_size)), options));
  auto layers = std::make_shared<nn::ModuleList>();
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers->append(std::make_shared<Gemma3DecoderLayer>(c, i, options));
  register_module("layers", layers);
  register_module("norm", std::make_shared<GemmaRMSNorm>(c.hidden_size, c.rms_norm_eps, options,
                                                         c.family() + "RMSNorm"));
  register_module("rotary_emb", std::make_shared<Gemma3RotaryEmbedding>(c, options));
}

nn::Value Gemma3TextModel::forward(const nn::Args& args) {
  const Tensor& ids = args.tensor(0);
  const nn::Value& past = args.get(1, "past_key_values");
  const bool use_cache = args.get(2, "use_cache", false).to_bool();
  FSDP_CHECK(ids.dim() == 2 && ids.dtype() == DType::Int64 && ids.size(1) >= 1, ValueError,
             "{}TextModel: expected int64 token ids [batch, seq], got {} {}", config.family(),
             dtype_name(ids.dtype()), shape_str(ids.shape()));
  const std::int64_t past_len = past.is_none() ? 0 : past[0][0].tensor().size(2);
  Tensor h = call_child("embed_tokens", ids);
  std::map<std::string, nn::Value> cos_sin;  // per layer type
  for (const auto& type : config.layer_types)
    if (!cos_sin.count(type)) cos_sin[type] = (*child("rotary_emb"))(nn::Args({h, past_len, type}));
  // run_blocks calls block_args once per block, in order: `layer` follows it.
  std::size_t layer = 0;
  const nn::Value out =
      run_blocks(*child("layers"), h, past, use_cache, [&](const Tensor& x, const nn::Value& lp) {
        const nn::Value& cs = cos_sin.at(config.layer_types.at(layer++));
        return nn::Args({x, cs[0], cs[1], lp, use_cache});
      });
  if (!use_cache) return call_child("norm", out.tensor());
  return nn::Value(std::vector<nn::Value>{call_child("norm", out[0].tensor()), out[1]});
}

Gemma3ForCausalLM::Gemma3ForCausalLM(const GemmaConfig& c, TensorOptions options)
    : CausalLM(hf_class(c.architecture(), {c.family() + "PreTrainedModel", "PreTrainedModel"}),
               "model"),
      config(c) {
  auto model = register_module("model", std::make_shared<Gemma3TextModel>(c, options));
  auto head = std::make_shared<nn::Linear>(c.hidden_size, c.vocab_size, false, options);
  if (c.tie_word_embeddings)  // one Parameter in both slots, as transformers ties them
    head->set_parameter("weight", model->child("embed_tokens")->param("weight"));
  register_module("lm_head", head);
  init_weights(*this);
}

void Gemma3ForCausalLM::init_weights(nn::Module& module, Generator* generator) const {
  hf_init_weights(module, config.initializer_range, config.initializer_range, generator,
                  /*rms_norm_weight=*/0.0);
}

Tensor Gemma3ForCausalLM::final_logits(const Tensor& logits) const {
  if (!config.final_logit_softcapping) return logits;
  const double c = *config.final_logit_softcapping;
  return mul(tanh(div(logits, c)), c);
}

}  // namespace fsdp::models
