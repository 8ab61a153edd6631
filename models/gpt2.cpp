#include "models/gpt2.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/nn/container.h"
#include "core/nn/dropout.h"
#include "core/nn/embedding.h"
#include "core/nn/layer_norm.h"
#include "core/nn/linear.h"
#include "core/ops.h"
#include "models/activation.h"
#include "models/attention.h"
#include "models/conv1d.h"
#include "models/init_weights.h"

namespace fsdp::models {

namespace {

// transformers' GPT2Block derives from GradientCheckpointingLayer.
const nn::ModuleClass& block_class() {
  static const nn::ModuleClass& cls = hf_class("GPT2Block", {"GradientCheckpointingLayer"});
  return cls;
}

double attention_scale(const GPT2Config& c, std::int64_t layer_idx) {
  double s = c.scale_attn_weights ? 1.0 / std::sqrt(static_cast<double>(c.head_dim())) : 1.0;
  if (c.scale_attn_by_inverse_layer_idx) s /= static_cast<double>(layer_idx + 1);
  return s;
}

}  // namespace

GPT2Attention::GPT2Attention(const GPT2Config& c, std::int64_t layer_idx_, TensorOptions options)
    : Module(hf_class("GPT2Attention")),
      heads(c.n_head),
      layer_idx(layer_idx_),
      scale(attention_scale(c, layer_idx_)) {
  register_module("c_attn", std::make_shared<Conv1D>(3 * c.n_embd, c.n_embd, options));
  register_module("c_proj", std::make_shared<Conv1D>(c.n_embd, c.n_embd, options, true));
  register_module("attn_dropout", std::make_shared<nn::Dropout>(c.attn_pdrop));
  register_module("resid_dropout", std::make_shared<nn::Dropout>(c.resid_pdrop));
}

nn::Value GPT2Attention::forward(const nn::Args& args) {
  const Tensor qkv = call_child("c_attn", args.tensor(0));
  const std::int64_t E = qkv.size(-1) / 3;
  const Tensor q = split_heads(narrow(qkv, -1, 0, E), heads);
  const auto [k, v] =
      with_history(args.get(1, "layer_past"), split_heads(narrow(qkv, -1, E, E), heads),
                   split_heads(narrow(qkv, -1, 2 * E, E), heads));
  const double p = is_training() ? child_as<nn::Dropout>("attn_dropout")->p : 0.0;
  Tensor out = merge_heads(causal_attention(q, k, v, scale, p));
  out = call_child("resid_dropout", call_child("c_proj", out));
  return nn::Value(std::vector<nn::Value>{out, nn::Value(std::vector<nn::Value>{k, v})});
}

GPT2MLP::GPT2MLP(const GPT2Config& c, TensorOptions options) : Module(hf_class("GPT2MLP")) {
  register_module("c_fc", std::make_shared<Conv1D>(c.inner_dim(), c.n_embd, options));
  register_module("c_proj", std::make_shared<Conv1D>(c.n_embd, c.inner_dim(), options, true));
  register_module("act", std::make_shared<Activation>(c.activation_function));
  register_module("dropout", std::make_shared<nn::Dropout>(c.resid_pdrop));
}

nn::Value GPT2MLP::forward(const nn::Args& args) {
  const Tensor h = call_child("act", call_child("c_fc", args.tensor(0)));
  return call_child("dropout", call_child("c_proj", h));
}

GPT2Block::GPT2Block(const GPT2Config& c, std::int64_t layer_idx, TensorOptions options)
    : Module(block_class()) {
  const auto ln = [&] {
    return std::make_shared<nn::LayerNorm>(c.n_embd, c.layer_norm_epsilon, true, true, options);
  };
  register_module("ln_1", ln());
  register_module("attn", std::make_shared<GPT2Attention>(c, layer_idx, options));
  register_module("ln_2", ln());
  register_module("mlp", std::make_shared<GPT2MLP>(c, options));
}

nn::Value GPT2Block::forward(const nn::Args& args) {
  const Tensor& h = args.tensor(0);
  const nn::Value attn = (*child("attn"))(
      nn::Args({call_child("ln_1", h)}, {{"layer_past", args.get(1, "layer_past")}}));
  Tensor out = add(attn[0].tensor(), h);
  out = add(out, call_child("mlp", call_child("ln_2", out)));
  if (!args.get(2, "use_cache", false).to_bool()) return out;
  return nn::Value(std::vector<nn::Value>{out, attn[1]});
}

GPT2Model::GPT2Model(const GPT2Config& c, TensorOptions options)
    : Module(hf_class("GPT2Model", {"GPT2PreTrainedModel", "PreTrainedModel"})), config(c) {
  register_module("wte",
                  std::make_shared<nn::Embedding>(c.vocab_size, c.n_embd, std::nullopt, options));
  register_module("wpe",
                  std::make_shared<nn::Embedding>(c.n_positions, c.n_embd, std::nullopt, options));
  register_module("drop", std::make_shared<nn::Dropout>(c.embd_pdrop));
  auto blocks = std::make_shared<nn::ModuleList>();
  for (std::int64_t i = 0; i < c.n_layer; ++i)
    blocks->append(std::make_shared<GPT2Block>(c, i, options));
  register_module("h", blocks);
  register_module(
      "ln_f", std::make_shared<nn::LayerNorm>(c.n_embd, c.layer_norm_epsilon, true, true, options));
}

nn::Value GPT2Model::forward(const nn::Args& args) {
  const Tensor& ids = args.tensor(0);
  const nn::Value& past = args.get(1, "past_key_values");
  const bool use_cache = args.get(2, "use_cache", false).to_bool();
  FSDP_CHECK(ids.dim() == 2 && ids.dtype() == DType::Int64 && ids.size(1) >= 1, ValueError,
             "GPT2Model: expected int64 token ids [batch, seq], got {} {}", dtype_name(ids.dtype()),
             shape_str(ids.shape()));
  const std::int64_t S = ids.size(1);
  const std::int64_t past_len = past.is_none() ? 0 : past[0][0].tensor().size(2);
  FSDP_CHECK(past_len + S <= config.n_positions, IndexError,
             "GPT2Model: positions {}..{} exceed n_positions {}", past_len, past_len + S - 1,
             config.n_positions);
  const Tensor pos = arange(static_cast<double>(past_len), static_cast<double>(past_len + S), 1.0,
                            TensorOptions(DType::Int64, ids.device()));
  const Tensor h = call_child("drop", add(call_child("wte", ids), call_child("wpe", pos)));
  const nn::Value out =
      run_blocks(*child("h"), h, past, use_cache, [&](const Tensor& x, const nn::Value& lp) {
        return nn::Args({x}, {{"layer_past", lp}, {"use_cache", use_cache}});
      });
  if (!use_cache) return call_child("ln_f", out.tensor());
  return nn::Value(std::vector<nn::Value>{call_child("ln_f", out[0].tensor()), out[1]});
}

const nn::ModuleClass& GPT2LMHeadModel::static_class() {
  static const nn::ModuleClass& cls =
      hf_class("GPT2LMHeadModel", {"GPT2PreTrainedModel", "PreTrainedModel"});
  return cls;
}

GPT2LMHeadModel::GPT2LMHeadModel(const GPT2Config& c, TensorOptions options)
    : CausalLM(static_class(), "transformer"), config(c) {
  auto transformer = register_module("transformer", std::make_shared<GPT2Model>(c, options));
  auto head = std::make_shared<nn::Linear>(c.n_embd, c.vocab_size, false, options);
  if (c.tie_word_embeddings)  // one Parameter in both slots, as transformers ties them
    head->set_parameter("weight", transformer->child("wte")->param("weight"));
  register_module("lm_head", head);
  init_weights(*this);
}

void GPT2LMHeadModel::init_weights(nn::Module& module, Generator* generator) const {
  hf_init_weights(module, config.initializer_range,
                  config.initializer_range / std::sqrt(2.0 * static_cast<double>(config.n_layer)),
                  generator);
}

}  // namespace fsdp::models
