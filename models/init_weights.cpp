#include "models/init_weights.h"

#include <fmt/format.h>

#include <string_view>
#include <unordered_map>
#include <utility>

#include "core/autograd.h"
#include "core/error.h"
#include "core/nn/embedding.h"
#include "core/nn/init.h"
#include "core/ops.h"
#include "models/conv1d.h"

namespace fsdp::models {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

void hf_init_weights(nn::Module& module, double std, double residual_std, Generator* generator,
                     double rms_norm_weight) {
  // Each parameter's owning module and slot name (a tied tensor: its first owner).
  std::unordered_map<const TensorImpl*, std::pair<nn::Module*, std::string>> owner;
  for (const auto& [path, m] : module.named_modules())
    for (const auto& [name, p] : m->parameter_slots())
      if (p.defined()) owner.try_emplace(p.impl(), m.get(), name);
  autograd::NoGradGuard no_grad;
  for (const auto& [fqn, p] : module.named_parameters()) {
    if (p.is_meta()) continue;  // no storage yet: FSDP materialises and initialises it later
    auto& [m, name] = owner.at(p.impl());
    if (ends_with(m->type_name(), "RMSNorm")) {
      nn::init::constant_(p, name == "weight" ? rms_norm_weight : 0.0);
    } else if (m->isinstance("LayerNorm")) {
      nn::init::constant_(p, name == "weight" ? 1.0 : 0.0);
    } else if (name == "bias") {
      nn::init::zeros_(p);
    } else if (name == "weight") {
      const auto* conv = dynamic_cast<const Conv1D*>(m);
      nn::init::normal_(p, 0.0, conv && conv->residual ? residual_std : std, generator);
      if (auto* emb = dynamic_cast<nn::Embedding*>(m); emb && emb->padding_idx)
        p.select(0, *emb->padding_idx).zero_();
    } else {
      throw ValueError(
          fmt::format("hf_init_weights: no rule for parameter '{}' of a {}", fqn, m->type_name()));
    }
  }
  for (const auto& [path, m] : module.named_modules())
    if (m->parameter_slots().empty() && !m->buffer_slots().empty()) m->reset_parameters();
}

}  // namespace fsdp::models
