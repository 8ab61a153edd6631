#include "core/traversal/managed_params.h"

#include <deque>
#include <unordered_map>

namespace fsdp::traversal {

std::vector<std::pair<Tensor, std::string>> managed_param_to_fqn(const nn::ModulePtr& module_to_wrap,
                                                                 const ParamSet& ignored_params,
                                                                 ModuleSet& visited_modules,
                                                                 const std::string& root_prefix) {
  std::vector<std::pair<Tensor, std::string>> out;
  std::unordered_map<const TensorImpl*, std::size_t> position;
  std::deque<std::pair<nn::Module*, std::string>> queue{{module_to_wrap.get(), root_prefix}};
  visited_modules.insert(module_to_wrap.get());
  auto join = [](const std::string& prefix, const std::string& name) {
    return prefix.empty() ? name : prefix + "." + name;
  };
  while (!queue.empty()) {
    auto [module, prefix] = std::move(queue.front());
    queue.pop_front();
    // named_parameters(recurse=False): undefined slots skipped, one object once per module.
    for (const auto& [name, param] : module->named_parameters("", /*recurse=*/false)) {
      if (contains(ignored_params, param)) continue;
      auto [it, inserted] = position.emplace(param.impl(), out.size());
      if (inserted) out.emplace_back(param, join(prefix, name));
      else out[it->second].second = join(prefix, name);
    }
    for (const auto& [child_name, child] : module->child_slots()) {
      if (!child || !visited_modules.insert(child.get()).second) continue;
      queue.emplace_back(child.get(), join(prefix, child_name));
    }
  }
  return out;
}

}  // namespace fsdp::traversal
