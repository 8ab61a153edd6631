// auto_wrap: upstream's `_auto_wrap`, the entry point a wrapper's constructor calls to wrap the
// submodules of `root` (never root itself: the caller wraps it).
//
// A Policy object runs `run_policy` and then wraps the targets bottom-up (post-order apply), each
// with its own options; a callable policy runs the `_recursive_wrap` engine with the root options
// (plus each module's `_wrap_overrides`). With mixed precision set, the classes to ignore are
// wrapped separately with mixed precision disabled (see mixed_precision_override.h). Only the
// Policy path validates frozen parameters, as upstream.
#pragma once

#include <optional>
#include <string>

#include "core/module.h"
#include "core/traversal/module_sets.h"
#include "policies/frozen_params.h"
#include "policies/ignored.h"
#include "policies/options.h"
#include "policies/policy.h"
#include "policies/wrapper_fn.h"

namespace fsdp::policies {

// `ignored_modules` must already be closed under descendants (close_ignored_modules). An absent
// mixed_precision counts as None. `wrapper_class`, when given, is the marker class of the
// wrappers `wrap_fn` builds; the callable engine then also rejects existing instances of it.
void auto_wrap(const nn::ModulePtr& root, const AutoWrapPolicy& policy,
               const traversal::ModuleSet& ignored_modules,
               const traversal::ParamSet& ignored_params, WrapperOptions root_options,
               const WrapperFn& wrap_fn, const std::optional<std::string>& wrapper_class = {});

// Upstream's `_check_nested_wrapping`: ValueError naming the first (pre-order) module of `root`'s
// tree that is already a wrapper.
void check_nested_wrapping(const nn::ModulePtr& root);

}  // namespace fsdp::policies
