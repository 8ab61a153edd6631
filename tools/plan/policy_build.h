// From a --policy expression to the policies of policies/, and the call into their auto-wrap
// engine: the planner decides nothing about wrapping itself.
#pragma once

#include <functional>

#include "core/module.h"
#include "core/traversal/module_sets.h"
#include "policies/options.h"
#include "tools/plan/policy_expr.h"

namespace fsdp::plan {

// always -> always_wrap_policy; size(...) -> size_based_auto_wrap_policy; transformer([..]) ->
// transformer_auto_wrap_policy; individually([..]) -> _wrap_module_cls_individually; modules([..])
// -> ModuleWrapPolicy (a Policy object: the _run_policy engine); or(...) -> _or_policy over the
// operands' callable forms.
policies::AutoWrapPolicy build_policy(const PolicyExpr& expr);

// The recording wrapper: called once per unit, children before parents (the root is not
// included: the FSDP constructor wraps it). Returns what replaces the module in its slot.
using RecordFn =
    std::function<nn::ModulePtr(const nn::ModulePtr&, const policies::WrapperOptions&)>;

// FSDP's _auto_wrap with `root_options` as root_kwargs.
void run_auto_wrap(const nn::ModulePtr& root, const policies::AutoWrapPolicy& policy,
                   const traversal::ModuleSet& ignored_modules,
                   const traversal::ParamSet& ignored_params,
                   const policies::WrapperOptions& root_options, const RecordFn& record);

}  // namespace fsdp::plan
