// The parameters a wrapper unit would manage, with their FQNs (PyTorch's
// `_get_managed_param_to_fqn`), computed before anything is wrapped.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/module.h"
#include "core/traversal/module_sets.h"

namespace fsdp::traversal {

// Breadth-first from `module_to_wrap`, skipping modules already in `visited_modules` (the units
// found earlier in post-order) and adding every module reached to it. Ignored parameters are left
// out. In Python dict order: a parameter reached twice keeps its first position and its last FQN.
// FQNs are built on request (a deep unit's names would otherwise cost O(depth) each).
class ManagedParams {
 public:
  ManagedParams(const nn::ModulePtr& module_to_wrap, const ParamSet& ignored_params,
                ModuleSet& visited_modules);
  std::size_t size() const { return params_.size(); }
  const Tensor& param(std::size_t i) const { return params_[i].param; }
  // The i-th parameter's FQN below `root_prefix` (the unit's own name).
  std::string fqn(std::size_t i, const std::string& root_prefix) const;

 private:
  struct Node {
    std::int64_t parent;         // -1 for the unit itself
    const std::string* segment;  // slot name in the parent
  };
  struct Entry {
    Tensor param;
    std::int64_t node;
    const std::string* name;
  };
  std::vector<Node> nodes_;
  std::vector<Entry> params_;
};

// The same as a list of (parameter, FQN).
std::vector<std::pair<Tensor, std::string>> managed_param_to_fqn(
    const nn::ModulePtr& module_to_wrap, const ParamSet& ignored_params, ModuleSet& visited_modules,
    const std::string& root_prefix);

}  // namespace fsdp::traversal
