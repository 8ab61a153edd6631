#include "models/llama.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/nn/container.h"
#include "core/nn/embedding.h"
#include "core/nn/init.h"
#include "core/nn/linear.h"
#include "core/ops.h"
#include "models/activation.h"
#include "models/attention.h"
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

LlamaAttention::LlamaAttention(const LlamaConfig& c, std::int64_t layer_idx_, TensorOptions options)
    : Module(hf_class(c.family() + "Attention")),
      heads(c.num_attention_heads),
      kv_heads(c.num_key_value_heads),
      head_dim(c.head_dim),
      layer_idx(layer_idx_),
      attention_dropout(c.attention_dropout),
      sliding_window(c.window_of(layer_idx_)),
      qk_norm(c.qk_norm) {
  const std::int64_t E = c.hidden_size, D = c.head_dim;
  const bool bias = c.attention_bias;
  register_module("q_proj", std::make_shared<nn::Linear>(E, heads * D, bias, options));
  register_module("k_proj", std::make_shared<nn::Linear>(E, kv_heads * D, bias, options));
  register_module("v_proj", std::make_shared<nn::Linear>(E, kv_heads * D, bias, options));
  register_module("o_proj", std::make_shared<nn::Linear>(heads * D, E, c.o_proj_bias, options));
  if (qk_norm) {
    for (const char* name : {"q_norm", "k_norm"})
      register_module(
          name, std::make_shared<LlamaRMSNorm>(D, c.rms_norm_eps, options, c.family() + "RMSNorm"));
  }
}

nn::Value LlamaAttention::forward(const nn::Args& args) {
  const Tensor& x = args.tensor(0);
  const Tensor& cos = args.get(1, "cos").tensor();
  const Tensor& sin = args.get(2, "sin").tensor();
  // Qwen3 normalises each head of q and k (over its head_dim) before RoPE.
  const auto heads_of = [&](const char* proj, const char* norm, std::int64_t n) {
    const Tensor h = split_heads(call_child(proj, x), n);
    return qk_norm ? call_child(norm, h) : h;
  };
  const Tensor q = apply_rotary(heads_of("q_proj", "q_norm", heads), cos, sin);
  const auto [k, v] =
      with_history(args.get(3, "layer_past"),
                   apply_rotary(heads_of("k_proj", "k_norm", kv_heads), cos, sin),  // after RoPE
                   split_heads(call_child("v_proj", x), kv_heads));
  const double p = is_training() ? attention_dropout : 0.0;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  const Tensor out =
      call_child("o_proj", merge_heads(causal_attention(q, k, v, scale, p, sliding_window)));
  return nn::Value(std::vector<nn::Value>{out, nn::Value(std::vector<nn::Value>{k, v})});
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

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& c, std::int64_t layer_idx,
                                     TensorOptions options)
    : Module(hf_class(c.family() + "DecoderLayer", {"GradientCheckpointingLayer"})) {
  register_module("self_attn", std::make_shared<LlamaAttention>(c, layer_idx, options));
  register_module("mlp", std::make_shared<LlamaMLP>(c, options));
  register_module("input_layernorm",
                  std::make_shared<LlamaRMSNorm>(c.hidden_size, c.rms_norm_eps, options,
                                                 c.family() + "RMSNorm"));
  register_module("post_attention_layernorm",
                  std::make_shared<LlamaRMSNorm>(c.hidden_size, c.rms_norm_eps, options,
                                                 c.family() + "RMSNorm"));
}

nn::Value LlamaDecoderLayer::forward(const nn::Args& args) {
  const Tensor& h = args.tensor(0);
  const nn::Value attn =
      (*child("self_attn"))(nn::Args({call_child("input_layernorm", h), args.get(1, "cos"),
                                      args.get(2, "sin"), args.get(3, "layer_past")}));
  Tensor out = add(h, attn[0].tensor());
  out = add(out, call_child("mlp", call_child("post_attention_layernorm", out)));
  if (!args.get(4, "use_cache", false).to_bool()) return out;
  return nn::Value(std::vector<nn::Value>{out, attn[1]});
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
    : CausalLM(causal_lm_class(c), "model"), config(c) {
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
