#include "fsdp/full_state_dict.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/fqn.h"
#include "core/ops.h"
#include "fsdp/attribute_forwarding.h"
#include "fsdp/param_shards.h"
#include "fsdp/runtime.h"

namespace fsdp {

namespace {

// The unit's FQN from the root (its runtime knows it once the root was initialised).
std::string unit_prefix(FullyShardedDataParallel& root, FullyShardedDataParallel& unit) {
  root.runtime().root_state();
  return unit.runtime().fqn();
}

// One parameter of the full state dict: where it comes from and its FQN.
struct FullParam {
  FullyShardedDataParallel* unit;
  std::size_t param;  // index in the unit's handle
  std::string fqn;
};

// The full state dict's parameters in the unwrapped model's order (module pre-order, then slot
// order), as PyTorch's state_dict: gathering goes unit by unit, the result is in this order.
// position[u][i] is the place of unit u's parameter i.
std::vector<FullParam> full_params(FullyShardedDataParallel& root,
                                   std::vector<std::vector<std::size_t>>& position) {
  std::unordered_map<const nn::Module*, std::size_t> module_order;
  root.visit_named_modules([&](const std::string&, const nn::ModulePtr& m) {
    module_order.emplace(m.get(), module_order.size());
  });
  std::vector<std::pair<std::size_t, FullParam>> ordered;
  std::vector<std::pair<std::size_t, std::size_t>> unit_param;
  const auto units = root.fsdp_units();
  for (std::size_t u = 0; u < units.size(); ++u) {
    auto* h = units[u]->handle();
    if (h == nullptr) continue;
    const std::string prefix = unit_prefix(root, *units[u]);
    for (std::size_t i = 0; i < h->params().size(); ++i) {
      const auto& p = h->params()[i];
      ordered.push_back({module_order.at(p.module), {units[u], i, state_dict_key(prefix, p.fqn)}});
      unit_param.emplace_back(u, i);
    }
  }
  std::vector<std::size_t> perm(ordered.size());
  for (std::size_t k = 0; k < perm.size(); ++k) perm[k] = k;
  std::stable_sort(perm.begin(), perm.end(), [&](std::size_t a, std::size_t b) {
    return ordered[a].first < ordered[b].first;
  });
  position.assign(units.size(), {});
  for (std::size_t u = 0; u < units.size(); ++u)
    if (units[u]->handle() != nullptr) position[u].resize(units[u]->handle()->params().size());
  std::vector<FullParam> out;
  for (std::size_t k : perm) {
    const auto [u, i] = unit_param[k];
    position[u][i] = out.size();
    out.push_back(std::move(ordered[k].second));
  }
  return out;
}

// Unshards each unit in turn (every rank: they are collectives) and gives `use` a view of each
// of its parameters' full values, with the parameter's place in full_params' order. With
// `drain`, unit k stays unsharded while unit k + 1 is gathered, and drain() is called before
// unit k is resharded: what `use` started with unit k's views may run during that gather.
template <typename Use>
void for_each_full_param(FullyShardedDataParallel& root,
                         const std::vector<std::vector<std::size_t>>& position, bool keep,
                         Use&& use, const std::function<void()>& drain) {
  const auto units = root.fsdp_units();
  // Every rank knows it (the summon's arguments are the same on every rank), so all refuse.
  for (auto* unit : units)
    FSDP_CHECK(!unit->runtime().summoned_rank0_only(), RuntimeError,
               "a full state dict inside summon_full_params(rank0_only=true) (unit '{}'): ranks "
               "other than 0 hold no full parameters there; take it outside the context",
               unit->runtime().fqn());
  FullyShardedDataParallel* previous = nullptr;
  auto reshard_previous = [&] {
    if (previous == nullptr) return;
    if (drain) drain();
    previous->runtime().reshard_now();
    previous = nullptr;
  };
  for (std::size_t u = 0; u < units.size(); ++u) {
    auto* h = units[u]->handle();
    if (h == nullptr) continue;
    unit_prefix(root, *units[u]);
    // Inside summon_full_params a unit it holds unsharded is read as it is (upstream's) and
    // stays unsharded.
    const bool held = units[u]->runtime().summoned();
    if (!drain) reshard_previous();
    if (!held) units[u]->runtime().unshard_now();
    reshard_previous();
    if (keep) {
      Tensor full = h->flat_param();
      for (std::size_t i = 0; i < h->params().size(); ++i) {
        const auto& p = h->params()[i];
        use(position[u][i], make_view(full, p.shape, contiguous_strides(p.shape),
                                      full.storage_offset() + h->layout().offsets[i]));
      }
    }
    if (!held) previous = units[u];
  }
  reshard_previous();
}

}  // namespace

void visit_full_state_dict(FullyShardedDataParallel& root, bool rank0_only,
                           const std::function<void(const std::vector<FullEntry>&)>& begin,
                           const std::function<void(std::size_t, const Tensor&)>& each,
                           const std::function<void()>& drain) {
  autograd::NoGradGuard no_grad;
  const bool keep = !rank0_only || root.rank() == 0;
  std::vector<std::vector<std::size_t>> position;
  const std::vector<FullParam> params = full_params(root, position);
  const NamedTensors unmanaged = unmanaged_params(root);  // whole on every rank
  NamedTensors buffers;  // persistent ones: torch's state_dict leaves the others out
  for (const auto& [name, b] : root.named_persistent_buffers())
    if (b.defined())
      buffers.emplace_back(clean_tensor_name(name),
                           root.runtime().root_state().buffer_for_state_dict(b));
  if (keep) {
    std::vector<FullEntry> entries;
    for (const auto& p : params) {
      const auto* h = p.unit->handle();
      entries.push_back({p.fqn, h->dtype(), h->params()[p.param].shape});
    }
    for (const auto& [name, t] : unmanaged) entries.push_back({name, t.dtype(), t.shape()});
    for (const auto& [name, b] : buffers) entries.push_back({name, b.dtype(), b.shape()});
    begin(entries);
  }
  for_each_full_param(root, position, keep, each, drain);
  if (!keep) return;
  for (std::size_t k = 0; k < unmanaged.size(); ++k) each(params.size() + k, unmanaged[k].second);
  for (std::size_t k = 0; k < buffers.size(); ++k)
    each(params.size() + unmanaged.size() + k, buffers[k].second);
}

NamedTensors full_state_dict(FullyShardedDataParallel& root, bool rank0_only) {
  NamedTensors out;
  visit_full_state_dict(
      root, rank0_only,
      [&](const std::vector<FullEntry>& entries) {
        out.resize(entries.size());
        for (std::size_t k = 0; k < entries.size(); ++k) out[k].first = entries[k].name;
      },
      [&](std::size_t k, const Tensor& v) { out[k].second = v.clone(); });
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
      const std::string fqn = state_dict_key(prefix, h->params()[i].fqn);
      auto it = by_name.find(fqn);
      for (const auto& s : h->shared_params()) {
        if (s.primary != i) continue;
        const std::string alias = state_dict_key(prefix, s.fqn);
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
  autograd::NoGradGuard no_grad;
  load_whole_tensors(root, by_name, used, "load_full_state_dict");
  for (const auto& [name, t] : state)
    FSDP_CHECK(used.count(name), KeyError,
               "load_full_state_dict: unexpected key '{}' (no parameter or buffer of the model "
               "has this FQN)",
               name);
}

}  // namespace fsdp
