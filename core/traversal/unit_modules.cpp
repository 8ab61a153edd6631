#include "core/traversal/unit_modules.h"

#include "core/fqn.h"
#include "core/traversal/wrapper_marker.h"

namespace fsdp::traversal {

std::vector<std::pair<nn::Module*, std::string>> unit_own_modules(nn::Module& root,
                                                                  const ModuleSet& ignored) {
  std::vector<std::pair<nn::Module*, std::string>> own;
  std::vector<std::pair<nn::Module*, std::string>> stack{{&root, ""}};
  while (!stack.empty()) {
    auto [m, prefix] = std::move(stack.back());
    stack.pop_back();
    if (is_wrapper(*m) || ignored.count(m)) continue;
    const auto& slots = m->child_slots();
    for (auto it = slots.rbegin(); it != slots.rend(); ++it)
      if (it->second) stack.emplace_back(it->second.get(), join_fqn(prefix, it->first));
    own.emplace_back(m, std::move(prefix));
  }
  return own;
}

std::vector<std::pair<std::string, nn::Module*>> named_units(nn::Module& root) {
  std::vector<std::pair<std::string, nn::Module*>> units;
  root.visit_named_modules([&](const std::string& name, const nn::ModulePtr& m) {
    if (is_wrapper(*m)) units.emplace_back(name, m.get());
  });
  return units;
}

}  // namespace fsdp::traversal
