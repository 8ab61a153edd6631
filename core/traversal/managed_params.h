// The parameters a wrapper unit would manage, with their FQNs (PyTorch's
// `_get_managed_param_to_fqn`), computed before anything is wrapped.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/module.h"
#include "core/traversal/module_sets.h"

namespace fsdp::traversal {

// Breadth-first from `module_to_wrap` (FQN prefix `root_prefix`), skipping modules already in
// `visited_modules` (the units found earlier in post-order) and adding every module reached to it.
// Ignored parameters are left out. In Python dict order: a parameter reached twice keeps its
// first position and its last FQN.
std::vector<std::pair<Tensor, std::string>> managed_param_to_fqn(const nn::ModulePtr& module_to_wrap,
                                                                 const ParamSet& ignored_params,
                                                                 ModuleSet& visited_modules,
                                                                 const std::string& root_prefix);

}  // namespace fsdp::traversal
