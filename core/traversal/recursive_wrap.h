// PyTorch's `_recursive_wrap`: the numel-counting engine of callable auto-wrap policies.
// Iterative (a chain 100 000 modules deep works) and linear in the model size: subtree numels
// are computed once, bottom-up, instead of once per visited module as upstream does; where the
// tree shares modules (a module reachable through two slots) the engine falls back to upstream's
// literal per-module recounting, so the results are the same in every case.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/module.h"
#include "core/traversal/module_sets.h"
#include "core/traversal/tree_table.h"

namespace fsdp::traversal {

// (module, recurse, nonwrapped_numel) -> decision; the callable-policy contract.
using WrapDecision = std::function<bool(nn::Module&, bool recurse, std::int64_t nonwrapped_numel)>;
// Wraps one module (upstream's `_wrap(module, wrapper_cls, **kwargs)`), returning the wrapper.
using WrapOne = std::function<nn::ModulePtr(const nn::ModulePtr&)>;

struct RecursiveWrapResult {
  nn::ModulePtr module;        // the module itself, or its wrapper
  std::int64_t wrapped_numel;  // parameter numel now inside wrappers
};

// For each visited module: fail if a non-ignored module of its subtree is already a wrapper of
// class `*wrapper_class` (null skips this check, as upstream does for a wrapper that is a
// function); count its non-ignored parameters; ask `policy(m, true, numel)` whether to recurse;
// wrap/replace its non-ignored children (registration order); then ask `policy(m, false,
// remainder)` whether to wrap it (never when `only_wrap_children`).
// `table`, when given, must be TreeTable(*module, ignored_params) of the unchanged tree (callers
// that already built one for their own checks pass it on).
RecursiveWrapResult recursive_wrap(const nn::ModulePtr& module, const WrapDecision& policy,
                                   const WrapOne& wrap, const ModuleSet& ignored_modules,
                                   const ParamSet& ignored_params, bool only_wrap_children = false,
                                   const std::string* wrapper_class = nullptr,
                                   const TreeTable* table = nullptr);

}  // namespace fsdp::traversal
