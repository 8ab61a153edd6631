#include "fsdp/state_dict_local.h"

#include <fmt/format.h>

#include <unordered_set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/fqn.h"
#include "fsdp/attribute_forwarding.h"
#include "fsdp/flat_param.h"
#include "fsdp/param_shards.h"
#include "fsdp/runtime.h"

namespace fsdp {

namespace {

std::string flat_key(FullyShardedDataParallel& unit) {
  return state_dict_key(unit.runtime().fqn(), "_flat_param");
}

// What a flat shard depends on: the rank, the shard group, the layout and the parameters.
std::string describe(const FlatParamHandle& h) {
  std::string params;
  for (const auto& p : h.params())
    params += fmt::format("{}{}{}", params.empty() ? "" : ", ", p.fqn, shape_str(p.shape));
  return fmt::format("rank {} of {}; {} elements; params {}", h.config().rank,
                     h.layout().group_size, h.local_shard().numel(), params);
}

// A NO_SHARD unit's keys: each parameter's FQN from the root (a tied one under each of its
// names, as upstream's full state dict) with its index in the handle.
std::vector<std::pair<std::string, std::size_t>> unsharded_keys(FullyShardedDataParallel& unit) {
  const FlatParamHandle& h = *unit.handle();
  const std::string& prefix = unit.runtime().fqn();
  std::vector<std::pair<std::string, std::size_t>> keys;
  for (std::size_t i = 0; i < h.params().size(); ++i)
    keys.emplace_back(state_dict_key(prefix, h.params()[i].fqn), i);
  for (const auto& s : h.shared_params())
    keys.emplace_back(state_dict_key(prefix, s.fqn), s.primary);
  return keys;
}

}  // namespace

LocalStateDict local_state_dict(FullyShardedDataParallel& root) {
  root.runtime().root_state();
  autograd::NoGradGuard no_grad;
  LocalStateDict out;
  for (auto* unit : root.fsdp_units()) {
    auto* h = unit->handle();
    if (h == nullptr) continue;
    if (!h->sharded()) {  // upstream gives a NO_SHARD unit's full state dict (its parameters)
      for (const auto& [fqn, i] : unsharded_keys(*unit))
        out.tensors.emplace_back(fqn, h->shard_piece(i).reshape(h->params()[i].shape).clone());
      continue;
    }
    const std::string key = flat_key(*unit);
    out.tensors.emplace_back(key, h->local_shard().clone());
    out.metadata[key] = describe(*h);
  }
  for (const auto& [fqn, t] : unmanaged_params(root, /*each_fqn=*/true))
    out.tensors.emplace_back(fqn, t.clone());
  for (const auto& [fqn, b] : persistent_buffers(root)) out.tensors.emplace_back(fqn, b.clone());
  return out;
}

void load_local_state_dict(FullyShardedDataParallel& root, const LocalStateDict& state) {
  root.runtime().root_state();
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : state.tensors) by_name[name] = &t;
  std::unordered_set<std::string> used;
  autograd::NoGradGuard no_grad;
  for (auto* unit : root.fsdp_units()) {
    auto* h = unit->handle();
    if (h == nullptr) continue;
    if (!h->sharded()) {  // its parameters by FQN (local_state_dict); each must be there
      std::vector<bool> loaded(h->params().size(), false);
      for (const auto& [fqn, i] : unsharded_keys(*unit)) {
        auto it = by_name.find(fqn);
        if (it == by_name.end()) continue;
        FSDP_CHECK(it->second->shape() == h->params()[i].shape, ValueError,
                   "load_local_state_dict: '{}' has shape {} in the state dict but {} in the model",
                   fqn, shape_str(it->second->shape()), shape_str(h->params()[i].shape));
        used.insert(fqn);
        if (!loaded[i]) h->load_full_param(i, *it->second);
        loaded[i] = true;
      }
      for (std::size_t i = 0; i < loaded.size(); ++i)
        FSDP_CHECK(loaded[i], KeyError,
                   "load_local_state_dict: missing key '{}' (a parameter of NO_SHARD FSDP unit "
                   "'{}', saved by FQN as upstream's)",
                   state_dict_key(unit->runtime().fqn(), h->params()[i].fqn),
                   unit->runtime().fqn());
      continue;
    }
    const std::string key = flat_key(*unit), ours = describe(*h);
    auto it = by_name.find(key);
    auto meta = state.metadata.find(key);
    FSDP_CHECK(it != by_name.end() && meta != state.metadata.end(), ValueError,
               "load_local_state_dict: no '{}' in the state dict (this rank's unit is {}): a "
               "LOCAL_STATE_DICT loads only into the same wrapping and world size; use "
               "SHARDED_STATE_DICT to load at another",
               key, ours);
    FSDP_CHECK(meta->second == ours && it->second->numel() == h->local_shard().numel(), ValueError,
               "load_local_state_dict: '{}' was saved as {}, but this rank's unit is {}: a "
               "LOCAL_STATE_DICT loads only into the same wrapping and world size; use "
               "SHARDED_STATE_DICT to load at another",
               key, meta->second, ours);
    used.insert(key);
    Tensor dst = h->local_shard();
    copy_unversioned(dst, it->second->reshape({dst.numel()}).to(h->dtype()));
    dst.storage()->bump_version();
  }
  load_whole_tensors(root, by_name, used, "load_local_state_dict");
  for (const auto& [name, t] : state.tensors)
    FSDP_CHECK(used.count(name), KeyError,
               "load_local_state_dict: unexpected key '{}' (no flat parameter or buffer of the "
               "model has this FQN)",
               name);
}

}  // namespace fsdp
