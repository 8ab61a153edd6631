#include "fsdp/param_shards.h"

#include <unordered_map>
#include <unordered_set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/fqn.h"
#include "fsdp/attribute_forwarding.h"
#include "fsdp/runtime.h"

namespace fsdp {

std::vector<ParamShard> param_shards(FullyShardedDataParallel& root) {
  root.runtime().root_state();
  std::vector<ParamShard> out;
  for (auto* unit : root.fsdp_units()) {
    auto* h = unit->handle();
    if (h == nullptr) continue;
    // Another rank holds the same pieces: NO_SHARD's other ranks, HYBRID's other replicas.
    const bool replica =
        (!h->sharded() && unit->rank() != 0) ||
        (unit->replicate_group() != nullptr && unit->replicate_group()->rank() != 0);
    for (std::size_t i = 0; i < h->params().size(); ++i) {
      ParamShard p;
      p.unit = unit;
      p.handle = h;
      p.index = i;
      p.fqn = state_dict_key(unit->runtime().fqn(), h->params()[i].fqn);
      p.shape = h->params()[i].shape;
      p.info = h->shard_info(i);
      p.replica = replica;
      out.push_back(std::move(p));
    }
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> unmanaged_params(FullyShardedDataParallel& root,
                                                             bool each_fqn) {
  // Managed: the flat parameters and the originals they flattened (use_orig_params keeps the
  // originals in the module slots; otherwise the slots hold plain tensors, not parameters).
  std::unordered_set<const TensorImpl*> managed;
  for (auto* unit : root.fsdp_units()) {
    auto* h = unit->handle();
    if (h == nullptr) continue;
    managed.insert(h->flat_param().impl());
    for (const auto& p : h->params()) managed.insert(p.orig.impl());
    for (const auto& v : h->exposed_views()) managed.insert(v.impl());  // inside a summon
  }
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, p] : root.named_parameters("", true, /*remove_duplicate=*/!each_fqn))
    if (p.defined() && !managed.count(p.impl())) out.emplace_back(clean_tensor_name(name), p);
  return out;
}

std::vector<std::pair<std::string, Tensor>> persistent_buffers(FullyShardedDataParallel& root) {
  std::unordered_set<std::string> in_state_dict;  // what nn.Module.state_dict keeps
  for (const auto& [name, t] : root.state_dict()) in_state_dict.insert(name);
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, b] : root.named_buffers("", true, /*remove_duplicate=*/false))
    if (b.defined() && in_state_dict.count(name)) out.emplace_back(clean_tensor_name(name), b);
  return out;
}

std::vector<std::pair<std::string, std::string>> tied_aliases(FullyShardedDataParallel& root) {
  root.runtime().root_state();
  std::vector<std::pair<std::string, std::string>> out;
  // What every rank holds whole (an ignored module's parameters, persistent buffers) under the
  // later names of a module met twice.
  std::unordered_map<const TensorImpl*, std::string> first_name;
  auto add = [&](const std::vector<std::pair<std::string, Tensor>>& each_fqn) {
    for (const auto& [fqn, t] : each_fqn) {
      auto [it, first] = first_name.emplace(t.impl(), fqn);
      if (!first) out.emplace_back(fqn, it->second);
    }
  };
  add(unmanaged_params(root, /*each_fqn=*/true));
  add(persistent_buffers(root));
  for (auto* unit : root.fsdp_units()) {
    auto* h = unit->handle();
    if (h == nullptr) continue;
    const std::string& prefix = unit->runtime().fqn();
    for (const auto& s : h->shared_params())
      out.emplace_back(state_dict_key(prefix, s.fqn),
                       state_dict_key(prefix, h->params()[s.primary].fqn));
  }
  return out;
}

void load_whole_tensors(FullyShardedDataParallel& root,
                        const std::map<std::string, const Tensor*>& by_name,
                        std::unordered_set<std::string>& used, const char* op) {
  autograd::NoGradGuard no_grad;
  std::unordered_set<const TensorImpl*> loaded;  // a tied parameter's later FQNs: optional
  for (const auto& [fqn, p] : unmanaged_params(root, /*each_fqn=*/true)) {
    auto it = by_name.find(fqn);
    if (it == by_name.end() && loaded.count(p.impl())) continue;
    loaded.insert(p.impl());
    FSDP_CHECK(it != by_name.end(), KeyError,
               "{}: missing key '{}' (a parameter no FSDP unit manages: an ignored module's)", op,
               fqn);
    FSDP_CHECK(it->second->shape() == p.shape(), ValueError,
               "{}: '{}' has shape {} in the state dict but {} in the model", op, fqn,
               shape_str(it->second->shape()), shape_str(p.shape()));
    used.insert(fqn);
    Tensor dst = p;
    dst.copy_(*it->second);
  }
  for (const auto& [fqn, b] : persistent_buffers(root)) {
    auto it = by_name.find(fqn);
    if (it == by_name.end()) continue;
    used.insert(fqn);
    Tensor dst = b;
    dst.copy_(*it->second);
  }
}

}  // namespace fsdp
