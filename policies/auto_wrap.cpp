#include "policies/auto_wrap.h"

#include <fmt/format.h>

#include <any>

#include "core/error.h"
#include "core/traversal/post_order.h"
#include "core/traversal/pre_order.h"
#include "core/traversal/recursive_wrap.h"
#include "core/traversal/tree_table.h"
#include "core/traversal/wrapper_marker.h"
#include "policies/mixed_precision_override.h"
#include "policies/module_cls_individually.h"
#include "policies/or_policy.h"

namespace fsdp::policies {

nn::ModulePtr wrap_module(const nn::ModulePtr& module, const WrapperFn& wrapper_cls,
                          const WrapperOptions& options) {
  if (!wrapper_cls) throw AssertionError("Expected wrapper_cls to be set");
  if (module->has_attr(kWrapOverridesAttr)) {
    // The module's own overrides win (upstream uses this to disable mixed precision for BN).
    const auto& own = std::any_cast<const WrapperOptions&>(module->attr(kWrapOverridesAttr));
    return wrapper_cls(module, options.merged(own));
  }
  return wrapper_cls(module, options);
}

namespace {
[[noreturn]] void throw_nested(const std::string& name, const nn::ModulePtr& root) {
  throw ValueError(fmt::format(
      "FSDP auto wrapping requires modules to not already have FSDP applied but found {} in\n{}",
      name, root->repr()));
}

}  // namespace

void check_nested_wrapping(const nn::ModulePtr& root) {
  traversal::PreOrderModules modules(root);  // named_modules() order; names only for the error
  for (std::size_t i = 0; i < modules.size(); ++i)
    if (traversal::is_wrapper(*modules.module(i))) throw_nested(modules.name(i), root);
}

namespace {
// check_nested_wrapping from a table of the same tree (pre-order = named_modules() order).
void check_nested_wrapping_in(const nn::ModulePtr& root, const traversal::TreeTable& table) {
  if (!table.is_tree()) return check_nested_wrapping(root);
  if (!table.marked().empty())
    throw_nested(table.name(static_cast<std::size_t>(table.marked().front())), root);
}
}  // namespace

void auto_wrap(const nn::ModulePtr& root, const AutoWrapPolicy& policy,
               const traversal::ModuleSet& ignored_modules,
               const traversal::ParamSet& ignored_params, WrapperOptions root_options,
               const WrapperFn& wrap_fn, const std::optional<std::string>& wrapper_class) {
  const Setting<MixedPrecision> mixed_precision = root_options.mixed_precision;

  if (const auto& policy_object = policy.policy()) {
    check_nested_wrapping(root);
    // Children must not auto-wrap again.
    root_options.auto_wrap_policy = Setting<AutoWrapPolicy>::none();
    TargetModules targets = policy_object->run_policy(root, ignored_modules, root_options);
    if (mixed_precision.has_value()) {
      const auto& classes = mixed_precision->module_classes_to_ignore;
      run_mixed_precision_override_policy(root, classes, ignored_modules, root_options, targets);
      warn_on_overridden_mixed_precision(override_module_mixed_precision(root, classes));
    }
    validate_frozen_params(root, targets.keys(), ignored_params,
                           root_options.use_orig_params.value_or(false));
    // Bottom-up; the root is never wrapped here (its wrapper is the caller).
    traversal::post_order_apply(root, [&](const nn::ModulePtr& module) -> nn::ModulePtr {
      if (module == root) return nullptr;
      const WrapperOptions* options = targets.find(module.get());
      if (!options) return nullptr;
      return wrap_fn(module, *options);  // direct: `_wrap_overrides` is not consulted here
    });
    return;
  }

  // One pass over the tree serves the nested-wrapping check and the engine's subtree numels.
  const traversal::TreeTable table(*root, ignored_params);
  check_nested_wrapping_in(root, table);
  CallablePolicy callable = policy.callable();
  if (!callable) throw AssertionError("Must specify auto_wrap_policy.");
  if (mixed_precision.has_value()) {
    const auto& classes = mixed_precision->module_classes_to_ignore;
    auto overridden = override_module_mixed_precision(root, classes);
    callable = or_policy({callable, wrap_module_cls_individually(classes)});
    warn_on_overridden_mixed_precision(overridden);
  }
  traversal::recursive_wrap(
      root, callable,
      [&](const nn::ModulePtr& module) { return wrap_module(module, wrap_fn, root_options); },
      ignored_modules, ignored_params, /*only_wrap_children=*/true,
      wrapper_class ? &*wrapper_class : nullptr, &table);
}

}  // namespace fsdp::policies
