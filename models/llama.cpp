#include "models/llama.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/nn/container.h"
#include "core/nn/embedding.h"
#include "core/nn/init.h"
#include "core/nn/linear.h"
#include "core/ops.h"
#include "models/activation.h"
#include "models/init_weights.h"
#include "models/rope.h"

namespace fsdp::models {

LlamaRMSNorm::LlamaRMSNorm(std::int64_t hidden_size, double eps_, TensorOptions options,
                           const std::string& cls)
    : Module(hf_class(cls)), eps(eps_) {
  register_parameter("weight", empty({hidden_size}, options.with_requires_grad(false)));
  reset_parameters();
}

Tensor LlamaRMSNorm::forward(const Tensor& x) {
  return rms_norm(x, param("weight"), eps);
}

void LlamaRMSNorm::reset_parameters() {
  autograd::NoGradGuard no_grad;
  nn::init::ones_(param("weight"));
}

std::string LlamaRMSNorm::extra_repr() const {
  return fmt::format("({},), eps={}", param("weight").size(0), eps);
}

LlamaMLP::LlamaMLP(const LlamaConfig& c, TensorOptions options)
    : LlamaMLP(c.family() + "MLP", c.hidden_size, c.intermediate_size, c.mlp_bias, c.hidden_act,
               options) {}

LlamaMLP::LlamaMLP(const std::string& cls, std::int64_t E, std::int64_t I, bool bias,
                   const std::string& activation, TensorOptions options)
    : Module(hf_class(cls)) {
  register_module("gate_proj", std::make_shared<nn::Linear>(E, I, bias, options));
  register_module("up_proj", std::make_shared<nn::Linear>(E, I, bias, options));
  register_module("down_proj", std::make_shared<nn::Linear>(I, E, bias, options));
  register_module("act_fn", std::make_shared<Activation>(activation));
}

nn::Value LlamaMLP::forward(const nn::Args& args) {
  const Tensor& x = args.tensor(0);
  const Tensor gate = call_child("act_fn", call_child("gate_proj", x));
  return call_child("down_proj", mul(gate, call_child("up_proj", x)));
}

DecoderLayer::DecoderLayer(const std::string& family, GroupedQueryAttentionOptions attention,
                           std::int64_t layer_idx, TensorOptions options)
    : Module(hf_class(family + "DecoderLayer", {"GradientCheckpointingLayer"})) {
  register_module("self_attn", std::make_shared<GroupedQueryAttention>(std::move(attention),
                                                                       layer_idx, options));
}

nn::Value DecoderLayer::forward(const nn::Args& args) {
  const Tensor& h = args.tensor(0);
  const nn::Value attn =
      (*child("self_attn"))(nn::Args({call_child("input_layernorm", h), args.get(1, "cos"),
                                      args.get(2, "sin"), args.get(3, "layer_past")}));
  const Tensor out = residuals(h, attn[0].tensor());
  if (!args.get(4, "use_cache", false).to_bool()) return out;
  return nn::Value(std::vector<nn::Value>{out, attn[1]});
}

namespace {

// Llama's attention: scale 1 / sqrt(head_dim), Qwen3's q_norm and k_norm its RMSNorm.
GroupedQueryAttentionOptions attention_options(const LlamaConfig& c, std::int64_t layer_idx,
                                               TensorOptions options) {
  auto o = config_attention_options<LlamaRMSNorm>(c, layer_idx, c.qk_norm, options);
  o.qkv_bias = c.attention_bias;
  o.o_proj_bias = c.o_proj_bias;
  o.scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  return o;
}

}  // namespace

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& c, std::int64_t layer_idx,
                                     TensorOptions options)
    : DecoderLayer(c.family(), attention_options(c, layer_idx, options), layer_idx, options) {
  register_module("mlp", std::make_shared<LlamaMLP>(c, options));
  for (const char* name : {"input_layernorm", "post_attention_layernorm"})
    register_module(name, std::make_shared<LlamaRMSNorm>(c.hidden_size, c.rms_norm_eps, options,
                                                         c.family() + "RMSNorm"));
}

Tensor LlamaDecoderLayer::residuals(const Tensor& h, const Tensor& attention) {
  const Tensor out = add(h, attention);
  return add(out, call_child("mlp", call_child("post_attention_layernorm", out)));
}

LlamaModel::LlamaModel(const LlamaConfig& c, TensorOptions options)
    : Module(hf_class(c.family() + "Model", {c.family() + "PreTrainedModel", "PreTrainedModel"})),
      config(c) {
  register_module("embed_tokens", std::make_shared<nn::Embedding>(c.vocab_size, c.hidden_size,
                                                                  c.pad_token_id, options));
  auto layers = std::make_shared<nn::ModuleList>();
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers->append(std::make_shared<LlamaDecoderLayer>(c, i, options));
  register_module("layers", layers);
  register_module("norm", std::make_shared<LlamaRMSNorm>(c.hidden_size, c.rms_norm_eps, options,
                                                         c.family() + "RMSNorm"));
  register_module("rotary_emb", std::make_shared<LlamaRotaryEmbedding>(
                                    c, options, c.family() + "RotaryEmbedding"));
}

nn::Value LlamaModel::forward(const nn::Args& args) {
  const Tensor& ids = args.tensor(0);
  const nn::Value& past = args.get(1, "past_key_values");
  const bool use_cache = args.get(2, "use_cache", false).to_bool();
  FSDP_CHECK(ids.dim() == 2 && ids.dtype() == DType::Int64 && ids.size(1) >= 1, ValueError,
             "{}Model: expected int64 token ids [batch, seq], got {} {}", config.family(),
             dtype_name(ids.dtype()), shape_str(ids.shape()));
  const std::int64_t past_len = past.is_none() ? 0 : past[0][0].tensor().size(2);
  Tensor h = call_child("embed_tokens", ids);
  const nn::Value cos_sin = (*child("rotary_emb"))(nn::Args({h, past_len}));
  const nn::Value out =
      run_blocks(*child("layers"), h, past, use_cache, [&](const Tensor& x, const nn::Value& lp) {
        return nn::Args({x, cos_sin[0], cos_sin[1], lp, use_cache});
      });
  if (!use_cache) return call_child("norm", out.tensor());
  return nn::Value(std::vector<nn::Value>{call_child("norm", out[0].tensor()), out[1]});
}

const nn::ModuleClass& LlamaForCausalLM::static_class() {
  static const nn::ModuleClass& cls =
      hf_class("LlamaForCausalLM", {"LlamaPreTrainedModel", "PreTrainedModel"});
  return cls;
}

namespace {

const nn::ModuleClass& causal_lm_class(const LlamaConfig& c) {
  if (c.model_type == "llama") return LlamaForCausalLM::static_class();
  return hf_class(c.family() + "ForCausalLM", {c.family() + "PreTrainedModel", "PreTrainedModel"});
}

}  // namespace

LlamaForCausalLM::LlamaForCausalLM(const LlamaConfig& c, TensorOptions options)
    : RotaryCausalLM(causal_lm_class(c), c) {
  auto model = register_module("model", std::make_shared<LlamaModel>(c, options));
  auto head = std::make_shared<nn::Linear>(c.hidden_size, c.vocab_size, false, options);
  if (c.tie_word_embeddings)  // one Parameter in both slots, as transformers ties them
    head->set_parameter("weight", model->child("embed_tokens")->param("weight"));
  register_module("lm_head", head);
  init_weights(*this);
}

void LlamaForCausalLM::init_weights(nn::Module& module, Generator* generator) const {
  hf_init_weights(module, config.initializer_range, config.initializer_range, generator);
}

}  // namespace fsdp::models
