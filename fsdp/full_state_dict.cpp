#include "fsdp/full_state_dict.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"
#include "fsdp/attribute_forwarding.h"
#include "fsdp/runtime.h"

namespace fsdp {

std::string join_fqn(const std::string& prefix, const std::string& name) {
  if (prefix.empty()) return name;
  if (name.empty()) return prefix;
  return prefix + "." + name;
}

namespace {

// The unit's FQN from the root (its runtime knows it once the root was initialised).
std::string unit_prefix(FullyShardedDataParallel& root, FullyShardedDataParallel& unit) {
  root.runtime().root_state();
  return unit.runtime().fqn();
}

}  // namespace

NamedTensors full_state_dict(FullyShardedDataParallel& root, bool rank0_only) {
  autograd::NoGradGuard no_grad;
  const bool keep = !rank0_only || root.rank() == 0;
  // The unwrapped model's order (module pre-order, then slot order), as PyTorch's state_dict:
  // gathering goes unit by unit, the result is sorted back.
  std::unordered_map<const nn::Module*, std::size_t> module_order;
  root.visit_named_modules([&](const std::string&, const nn::ModulePtr& m) {
    module_order.emplace(m.get(), module_order.size());
  });
  std::vector<std::pair<std::size_t, std::pair<std::string, Tensor>>> ordered;
  NamedTensors out;
  for (auto* unit : root.fsdp_units()) {
    auto* h = unit->handle();
    if (h == nullptr) continue;
    const std::string prefix = unit_prefix(root, *unit);
    unit->runtime().unshard_now();
    if (keep) {
      Tensor full = h->flat_param();
      for (std::size_t i = 0; i < h->params().size(); ++i) {
        const auto& p = h->params()[i];
        Tensor v = make_view(full, p.shape, contiguous_strides(p.shape),
                             full.storage_offset() + h->layout().offsets[i]);
        ordered.push_back({module_order.at(p.module), {join_fqn(prefix, p.fqn), v.clone()}});
      }
    }
    unit->runtime().reshard_now();
  }
  if (!keep) return out;
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [order, entry] : ordered) out.push_back(std::move(entry));
  for (const auto& [name, b] : root.named_buffers())
    if (b.defined())
      out.emplace_back(clean_tensor_name(name),
                       root.runtime().root_state().buffer_for_state_dict(b).clone());
  return out;
}

void load_full_state_dict(FullyShardedDataParallel& root, const NamedTensors& state) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : state) by_name[name] = &t;
  std::unordered_set<std::string> used;
  for (auto* unit : root.fsdp_units()) {
    auto* h = unit->handle();
    if (h == nullptr) continue;
    const std::string prefix = unit_prefix(root, *unit);
    for (std::size_t i = 0; i < h->params().size(); ++i) {
      const std::string fqn = join_fqn(prefix, h->params()[i].fqn);
      auto it = by_name.find(fqn);
      for (const auto& s : h->shared_params()) {
        if (s.primary != i) continue;
        const std::string alias = join_fqn(prefix, s.fqn);
        if (by_name.count(alias)) {
          used.insert(alias);
          if (it == by_name.end()) it = by_name.find(alias);
        }
      }
      FSDP_CHECK(it != by_name.end(), KeyError,
                 "load_full_state_dict: missing key '{}' (a parameter of FSDP unit '{}')", fqn,
                 prefix);
      used.insert(it->first);
      FSDP_CHECK(it->second->shape() == h->params()[i].shape, ValueError,
                 "load_full_state_dict: '{}' has shape {} in the state dict but {} in the model",
                 fqn, shape_str(it->second->shape()), shape_str(h->params()[i].shape));
      h->load_full_param(i, *it->second);
    }
  }
  for (const auto& [name, b] : root.named_buffers()) {
    const std::string fqn = clean_tensor_name(name);
    auto it = by_name.find(fqn);
    if (it == by_name.end() || !b.defined()) continue;
    used.insert(fqn);
    autograd::NoGradGuard no_grad;
    Tensor dst = b;
    dst.copy_(*it->second);
  }
  for (const auto& [name, t] : state)
    FSDP_CHECK(used.count(name), KeyError,
               "load_full_state_dict: unexpected key '{}' (no parameter or buffer of the model "
               "has this FQN)",
               name);
}

}  // namespace fsdp
