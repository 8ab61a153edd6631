#include "core/traversal/managed_params.h"

#include <unordered_map>

#include "core/fqn.h"

namespace fsdp::traversal {

ManagedParams::ManagedParams(const nn::ModulePtr& module_to_wrap, const ParamSet& ignored_params,
                             ModuleSet& visited_modules) {
  std::unordered_map<const TensorImpl*, std::size_t> position;
  std::vector<nn::Module*> queue{module_to_wrap.get()};  // FIFO by index; node i is queue[i]
  nodes_.push_back({-1, nullptr});
  visited_modules.insert(module_to_wrap.get());
  for (std::size_t head = 0; head < queue.size(); ++head) {
    nn::Module* module = queue[head];
    // named_parameters(recurse=False): undefined slots skipped, one object once per module.
    const auto& slots = module->parameter_slots();
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const Tensor& p = slots[i].second;
      if (!p.defined() || contains(ignored_params, p)) continue;
      bool repeat = false;
      for (std::size_t j = 0; j < i && !repeat; ++j) repeat = slots[j].second.impl() == p.impl();
      if (repeat) continue;
      Entry e{p, static_cast<std::int64_t>(head), &slots[i].first};
      auto [it, inserted] = position.emplace(p.impl(), params_.size());
      if (inserted)
        params_.push_back(std::move(e));
      else
        params_[it->second] = std::move(e);  // dict: first position, last FQN
    }
    for (const auto& [child_name, child] : module->child_slots()) {
      if (!child || !visited_modules.insert(child.get()).second) continue;
      queue.push_back(child.get());
      nodes_.push_back({static_cast<std::int64_t>(head), &child_name});
    }
  }
}

std::string ManagedParams::fqn(std::size_t i, const std::string& root_prefix) const {
  std::vector<const std::string*> parts{params_[i].name};
  for (std::int64_t n = params_[i].node; nodes_[static_cast<std::size_t>(n)].parent != -1;
       n = nodes_[static_cast<std::size_t>(n)].parent)
    parts.push_back(nodes_[static_cast<std::size_t>(n)].segment);
  return join_fqn_leaf_first(parts, root_prefix);
}

std::vector<std::pair<Tensor, std::string>> managed_param_to_fqn(
    const nn::ModulePtr& module_to_wrap, const ParamSet& ignored_params, ModuleSet& visited_modules,
    const std::string& root_prefix) {
  ManagedParams managed(module_to_wrap, ignored_params, visited_modules);
  std::vector<std::pair<Tensor, std::string>> out;
  out.reserve(managed.size());
  for (std::size_t i = 0; i < managed.size(); ++i)
    out.emplace_back(managed.param(i), managed.fqn(i, root_prefix));
  return out;
}

}  // namespace fsdp::traversal
