#include "examples/gpt.h"

#include <string_view>
#include <unordered_map>
#include <utility>

#include "core/autograd.h"
#include "core/nn/nn.h"
#include "core/ops.h"
#include "core/traversal/wrapper_marker.h"

namespace fsdp::examples {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

GPT::GPT(const GPTConfig& cfg, TensorOptions options) : Module(static_class()), config(cfg) {
  FSDP_CHECK(cfg.layers >= 0 && cfg.d_model > 0 && cfg.heads > 0 && cfg.seq > 0 && cfg.vocab > 0,
             ValueError,
             "GPT: sizes must be positive, got layers {} d_model {} heads {} seq {} "
             "vocab {}",
             cfg.layers, cfg.d_model, cfg.heads, cfg.seq, cfg.vocab);
  FSDP_CHECK(cfg.d_model % cfg.heads == 0, ValueError,
             "GPT: d_model {} is not divisible by heads {}", cfg.d_model, cfg.heads);
  auto tok_emb = std::make_shared<nn::Embedding>(cfg.vocab, cfg.d_model, std::nullopt, options);
  register_module("tok_emb", tok_emb);
  register_module("pos_emb",
                  std::make_shared<nn::Embedding>(cfg.seq, cfg.d_model, std::nullopt, options));
  auto blocks = std::make_shared<nn::ModuleList>();
  nn::TransformerEncoderLayerOptions o;
  o.dim_feedforward = 4 * cfg.d_model;
  o.dropout = 0.0;
  o.activation = "gelu";
  o.batch_first = true;
  o.norm_first = true;
  o.tensor = options;
  for (std::int64_t i = 0; i < cfg.layers; ++i)
    blocks->append(std::make_shared<nn::TransformerEncoderLayer>(cfg.d_model, cfg.heads, o));
  register_module("blocks", blocks);
  register_module("ln_f", std::make_shared<nn::LayerNorm>(cfg.d_model, 1e-5, true, true, options));
  auto head = std::make_shared<nn::Linear>(cfg.d_model, cfg.vocab, false, options);
  head->set_parameter("weight", tok_emb->param("weight"));  // tied: one tensor object
  register_module("head", head);
}

nn::Value GPT::forward(const nn::Args& args) {
  return nn::Value(forward(args.tensor(0)));
}

Tensor GPT::forward(const Tensor& idx) {
  FSDP_CHECK(idx.dim() == 2 && idx.dtype() == DType::Int64 && idx.size(1) >= 1 &&
                 idx.size(1) <= config.seq,
             ValueError,
             "GPT: expected int64 token ids [batch, time] with 1 <= time <= {}, got {} {}",
             config.seq, dtype_name(idx.dtype()), shape_str(idx.shape()));
  const std::int64_t t = idx.size(1);
  Tensor x = add(call_child("tok_emb", idx),
                 call_child("pos_emb", arange(t, TensorOptions(DType::Int64, idx.device()))));
  // Additive float mask, -inf where key j > query i: position i attends to j <= i only.
  const Tensor mask =
      nn::Transformer::generate_square_subsequent_mask(t, TensorOptions(x.dtype(), x.device()));
  for (const auto& [name, block] : traversal::unwrapped(*child("blocks")).child_slots()) {
    nn::Args a({nn::Value(x)}, {{"src_mask", nn::Value(mask)}, {"is_causal", nn::Value(true)}});
    x = (*block)(a).tensor();
  }
  return call_child("head", call_child("ln_f", x));
}

void gpt_init(nn::Module& module) {
  // Each parameter's owning module and slot name (a tied tensor: its first owner).
  std::unordered_map<const TensorImpl*, std::pair<const nn::Module*, std::string>> owner;
  for (const auto& [path, m] : module.named_modules())
    for (const auto& [name, p] : m->parameter_slots())
      if (p.defined()) owner.try_emplace(p.impl(), m.get(), name);
  autograd::NoGradGuard no_grad;
  for (const auto& [fqn, p] : module.named_parameters()) {
    const auto& [m, name] = owner.at(p.impl());
    if (m->isinstance("LayerNorm")) {
      FSDP_CHECK(name == "weight" || name == "bias", ValueError,
                 "gpt_init: unexpected LayerNorm parameter '{}'", fqn);
      nn::init::constant_(p, name == "weight" ? 1.0 : 0.0);
    } else if (name == "bias" || ends_with(name, "_bias")) {
      nn::init::zeros_(p);
    } else if (name == "weight" || ends_with(name, "_weight")) {
      nn::init::normal_(p, 0.0, 0.02);
    } else {
      throw ValueError(
          fmt::format("gpt_init: no GPT-2 rule for parameter '{}' of a {}", fqn, m->type_name()));
    }
  }
}

Tensor gpt_loss(nn::Module& model, const Tensor& inputs, const Tensor& targets) {
  Tensor logits = model(inputs).tensor();
  const std::int64_t vocab = logits.size(-1);
  return cross_entropy(logits.reshape({-1, vocab}), targets.reshape({-1}));
}

}  // namespace fsdp::examples
