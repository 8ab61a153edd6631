#include "core/traversal/pre_order.h"

#include "core/fqn.h"

namespace fsdp::traversal {

PreOrderModules::PreOrderModules(const nn::ModulePtr& root) {
  struct Pending {
    const nn::ModulePtr* module;  // points into a parent's slots (or at `root`)
    std::int64_t parent;
    const std::string* segment;
  };
  std::vector<Pending> stack{{&root, -1, nullptr}};
  while (!stack.empty()) {
    Pending p = stack.back();
    stack.pop_back();
    // The memo is checked when a module is reached, as named_modules does.
    auto index = static_cast<std::int64_t>(entries_.size());
    if (index_.insert(p.module->get(), index) != index) continue;
    entries_.push_back({p.module, p.parent, p.segment});
    const auto& slots = (*p.module)->child_slots();
    for (auto it = slots.rbegin(); it != slots.rend(); ++it)
      if (it->second) stack.push_back({&it->second, index, &it->first});
  }
}

std::string PreOrderModules::name(std::size_t i) const {
  std::vector<const std::string*> parts;
  for (auto e = static_cast<std::int64_t>(i); entries_[static_cast<std::size_t>(e)].parent != -1;
       e = entries_[static_cast<std::size_t>(e)].parent)
    parts.push_back(entries_[static_cast<std::size_t>(e)].segment);
  return join_fqn_leaf_first(parts);
}

std::vector<nn::ModulePtr> PreOrderModules::modules() const {
  std::vector<nn::ModulePtr> out;
  out.reserve(entries_.size());
  for (const auto& e : entries_) out.push_back(*e.module);
  return out;
}

std::vector<nn::ModulePtr> modules_of(const nn::ModulePtr& root) {
  return PreOrderModules(root).modules();
}

}  // namespace fsdp::traversal
