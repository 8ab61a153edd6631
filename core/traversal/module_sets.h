// Identity sets of modules and parameters: Python's `module in ignored_modules` and
// `param in ignored_params` compare objects, not values.
#pragma once

#include <unordered_set>

#include "core/module.h"
#include "core/tensor.h"

namespace fsdp::traversal {

using ModuleSet = std::unordered_set<const nn::Module*>;
using ParamSet = std::unordered_set<const TensorImpl*>;

inline bool contains(const ModuleSet& s, const nn::Module* m) {
  return !s.empty() && s.count(m);
}
inline bool contains(const ParamSet& s, const Tensor& p) {
  return !s.empty() && s.count(p.impl());
}

}  // namespace fsdp::traversal
