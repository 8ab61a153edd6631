// Fully qualified names (PyTorch's FQNs, "layers.0.attn.weight"): the one join of a prefix and a
// name, used by the module tree's named_* walks, state dicts and FSDP's unit FQNs.
#pragma once

#include <string>
#include <vector>

namespace fsdp {

// "prefix.name"; either part may be empty (the root's prefix is "").
inline std::string join_fqn(const std::string& prefix, const std::string& name) {
  if (prefix.empty()) return name;
  if (name.empty()) return prefix;
  return prefix + "." + name;
}

// The FQN of a path collected walking up from a leaf: `leaf_first` holds the names leaf first,
// joined root first after `prefix` (the tree tables' name lookups).
inline std::string join_fqn_leaf_first(const std::vector<const std::string*>& leaf_first,
                                       std::string prefix = {}) {
  for (auto it = leaf_first.rbegin(); it != leaf_first.rend(); ++it) {
    if (!prefix.empty()) prefix += '.';
    prefix += **it;
  }
  return prefix;
}

}  // namespace fsdp
