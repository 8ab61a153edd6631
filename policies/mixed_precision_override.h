// Mixed precision with auto-wrapping: modules of MixedPrecision::module_classes_to_ignore
// (default _BatchNorm) are wrapped as separate units with mixed precision disabled, and their
// forward runs in float32 (inputs cast up before, outputs cast back after).
#pragma once

#include <set>
#include <string>

#include "core/module.h"
#include "core/traversal/module_sets.h"
#include "policies/policy.h"

namespace fsdp::policies {

// Upstream's `_override_module_mixed_precision`: for every module of root.modules() (ignored ones
// included, as upstream) that is an instance of `classes`, sets its `_wrap_overrides` to
// {mixed_precision: None} and appends the float32 cast forward pre-hook and forward hook (again
// on every call, as upstream). Returns the concrete class names found.
std::set<std::string> override_module_mixed_precision(const nn::ModulePtr& root,
                                                      const nn::ClassSet& classes);

// Upstream's `_run_mixed_precision_override_policy`: every non-ignored instance of `classes`
// becomes a target (with the root options unless already a target) with mixed_precision=None.
// Upstream's entries alias one dict (root_kwargs); here each is its own copy and root_options is
// untouched — nothing reads root_kwargs afterwards, so the wrapping is the same.
void run_mixed_precision_override_policy(const nn::ModulePtr& root, const nn::ClassSet& classes,
                                         const traversal::ModuleSet& ignored_modules,
                                         const WrapperOptions& root_options,
                                         TargetModules& targets);

// The UserWarning listing the overridden classes (nothing when the set is empty). Its text keeps
// upstream's "instacnes" typo so that logs match PyTorch's word for word.
void warn_on_overridden_mixed_precision(const std::set<std::string>& overridden_classes);

// Python's repr of a class, e.g. "<class 'torch.nn.modules.batchnorm.BatchNorm1d'>".
std::string python_class_repr(const std::string& class_name);

}  // namespace fsdp::policies
