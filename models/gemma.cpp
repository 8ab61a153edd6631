#include "models/gemma.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/autograd.h"
#include "core/error.h"
#include "core/nn/container.h"
#include "core/nn/init.h"
#include "core/nn/linear.h"
#include "core/ops.h"
#include "models/init_weights.h"
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

GemmaScaledWordEmbedding::GemmaScaledWordEmbedding(const std::string& cls, std::int64_t num,
                                                   std::int64_t dim,
                                                   std::optional<std::int64_t> padding_idx,
                                                   double scale, TensorOptions options)
    : nn::Embedding(hf_class(cls, {"Embedding"}), num, dim,
                    nn::EmbeddingOptions{padding_idx, std::nullopt, 2.0, false, false, options}),
      embed_scale(scale) {}

Tensor GemmaScaledWordEmbedding::forward(const Tensor& indices) {
  const Tensor rows = nn::Embedding::forward(indices);
  // The buffer is float32 (torch.tensor of a Python float), cast to the weight's dtype.
  const double scale =
      to_dtype(full({}, static_cast<float>(embed_scale), DType::Float32), rows.dtype()).item();
  return mul(rows, scale);
}

nn::ModulePtr GemmaScaledWordEmbedding::clone_structure() const {
  return std::make_shared<GemmaScaledWordEmbedding>(type_name(), num_embeddings, embedding_dim,
                                                    padding_idx, embed_scale,
                                                    options().tensor.with_device(kMeta));
}

namespace {

// Gemma 3's buffers are named after its layer types (sorted, distinct), Gemma 2's plainly.
std::vector<std::string> rotary_buffer_prefixes(const GemmaConfig& c) {
  if (!c.rope_per_layer_type()) return {""};
  std::vector<std::string> v = c.layer_types;
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  for (auto& type : v) type += "_";
  return v;
}

}  // namespace

GemmaRotaryEmbedding::GemmaRotaryEmbedding(const GemmaConfig& c, TensorOptions options)
    : Module(hf_class(c.family() + "RotaryEmbedding")),
      config(c),
      buffer_prefixes(rotary_buffer_prefixes(c)) {
  const TensorOptions f32 = TensorOptions(DType::Float32, options.device);
  for (const auto& prefix : buffer_prefixes)
    for (const char* name : {"inv_freq", "original_inv_freq"})
      register_buffer(prefix + name, empty({c.head_dim / 2}, f32), /*persistent=*/false);
  reset_parameters();
}

void GemmaRotaryEmbedding::reset_parameters() {
  autograd::NoGradGuard no_grad;
  for (const auto& prefix : buffer_prefixes) {
    const Tensor& inv = buffer(prefix + "inv_freq");
    if (inv.is_meta()) continue;
    // The prefix is the layer type and "_" (Gemma 2: none, its one set of parameters).
    const std::string type = prefix.empty() ? "" : prefix.substr(0, prefix.size() - 1);
    const Tensor values = rope_inv_freq(config.rope_of(type), config.head_dim);
    Tensor(inv).copy_(values);
    Tensor(buffer(prefix + "original_inv_freq")).copy_(values);
  }
}

nn::Value GemmaRotaryEmbedding::forward(const nn::Args& args) {
  const Tensor& x = args.tensor(0);
  const std::int64_t past = args.get(1, "past_length", std::int64_t{0}).to_int();
  const std::string type = args.get(2, "layer_type").str();
  const std::string prefix = config.rope_per_layer_type() ? type + "_" : "";
  FSDP_CHECK(std::count(buffer_prefixes.begin(), buffer_prefixes.end(), prefix) == 1, ValueError,
             "{}: no layer type '{}'", type_name(), type);
  // The default and linear rope types' attention scaling is 1: cos and sin as they are.
  auto [cos, sin] = rotary_cos_sin(buffer(prefix + "inv_freq"), past, x.size(1), x.dtype());
  return nn::Value(std::vector<nn::Value>{cos, sin});
}

namespace {

// Gemma's attention: scale query_pre_attn_scalar ** -0.5, o_proj's bias attention_bias as q, k
// and v's, Gemma 2's score softcap, Gemma 3's q_norm and k_norm its RMSNorm.
GroupedQueryAttentionOptions attention_options(const GemmaConfig& c, std::int64_t layer_idx,
                                               TensorOptions options) {
  auto o = config_attention_options<GemmaRMSNorm>(c, layer_idx, c.qk_norm(), options);
  o.qkv_bias = o.o_proj_bias = c.attention_bias;
  o.scale = std::pow(c.query_pre_attn_scalar, -0.5);
  o.softcap = c.attention_softcap;
  return o;
}

}  // namespace

GemmaDecoderLayer::GemmaDecoderLayer(const GemmaConfig& c, std::int64_t layer_idx,
                                     TensorOptions options)
    : DecoderLayer(c.family(), attention_options(c, layer_idx, options), layer_idx, options) {
  register_module("mlp",
                  std::make_shared<LlamaMLP>(c.family() + "MLP", c.hidden_size, c.intermediate_size,
                                             false, c.hidden_activation, options));
  for (const char* name : {"input_layernorm", "post_attention_layernorm",
                           "pre_feedforward_layernorm", "post_feedforward_layernorm"})
    register_module(name, std::make_shared<GemmaRMSNorm>(c.hidden_size, c.rms_norm_eps, options,
                                                         c.family() + "RMSNorm"));
}

Tensor GemmaDecoderLayer::residuals(const Tensor& h, const Tensor& attention) {
  const Tensor out = add(h, call_child("post_attention_layernorm", attention));
  const Tensor mlp = call_child("mlp", call_child("pre_feedforward_layernorm", out));
  return add(out, call_child("post_feedforward_layernorm", mlp));
}

GemmaModel::GemmaModel(const GemmaConfig& c, TensorOptions options)
    : Module(hf_class(c.body_class(), {c.family() + "PreTrainedModel", "PreTrainedModel"})),
      config(c) {
  register_module("embed_tokens",
                  std::make_shared<GemmaScaledWordEmbedding>(
                      c.family() + "TextScaledWordEmbedding", c.vocab_size, c.hidden_size,
                      c.pad_token_id, std::sqrt(static_cast<double>(c.hidden_size)), options));
  auto layers = std::make_shared<nn::ModuleList>();
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers->append(std::make_shared<GemmaDecoderLayer>(c, i, options));
  register_module("layers", layers);
  register_module("norm", std::make_shared<GemmaRMSNorm>(c.hidden_size, c.rms_norm_eps, options,
                                                         c.family() + "RMSNorm"));
  register_module("rotary_emb", std::make_shared<GemmaRotaryEmbedding>(c, options));
}

nn::Value GemmaModel::forward(const nn::Args& args) {
  const Tensor& ids = args.tensor(0);
  const nn::Value& past = args.get(1, "past_key_values");
  const bool use_cache = args.get(2, "use_cache", false).to_bool();
  FSDP_CHECK(ids.dim() == 2 && ids.dtype() == DType::Int64 && ids.size(1) >= 1, ValueError,
             "{}: expected int64 token ids [batch, seq], got {} {}", config.body_class(),
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

GemmaForCausalLM::GemmaForCausalLM(const GemmaConfig& c, TensorOptions options)
    : RotaryCausalLM(
          hf_class(c.architecture(), {c.family() + "PreTrainedModel", "PreTrainedModel"}), c) {
  auto model = register_module("model", std::make_shared<GemmaModel>(c, options));
  auto head = std::make_shared<nn::Linear>(c.hidden_size, c.vocab_size, false, options);
  if (c.tie_word_embeddings)  // one Parameter in both slots, as transformers ties them
    head->set_parameter("weight", model->child("embed_tokens")->param("weight"));
  register_module("lm_head", head);
  init_weights(*this);
}

void GemmaForCausalLM::init_weights(nn::Module& module, Generator* generator) const {
  hf_init_weights(module, config.initializer_range, config.initializer_range, generator,
                  /*rms_norm_weight=*/0.0);
}

Tensor GemmaForCausalLM::final_logits(const Tensor& logits) const {
  if (!config.final_logit_softcapping) return logits;
  const double c = *config.final_logit_softcapping;
  return mul(tanh(div(logits, c)), c);
}

}  // namespace fsdp::models
