// The callable policies: each is a small closure over its configuration (Python's partial).
#include "policies/class_matcher.h"
#include "policies/lambda_policy.h"
#include "policies/module_cls_individually.h"
#include "policies/or_policy.h"
#include "policies/size_based.h"
#include "policies/transformer_policy.h"

namespace fsdp::policies {

CallablePolicy lambda_auto_wrap_policy(ModulePredicate lambda_fn) {
  return [fn = std::move(lambda_fn)](nn::Module& m, bool recurse, std::int64_t) {
    return recurse || fn(m);
  };
}

bool module_wrap_decision(const nn::Module& module, bool recurse, const nn::ClassSet& classes) {
  return recurse || module.isinstance(classes);
}

CallablePolicy transformer_auto_wrap_policy(nn::ClassSet transformer_layer_cls) {
  return [is_layer = ClassMatcher(std::move(transformer_layer_cls))](
             nn::Module& m, bool recurse, std::int64_t) { return recurse || is_layer(m); };
}

CallablePolicy wrap_module_cls_individually(nn::ClassSet module_classes) {
  return [is_member = ClassMatcher(std::move(module_classes))](
             nn::Module& m, bool recurse, std::int64_t) { return recurse || is_member(m); };
}

CallablePolicy or_policy(std::vector<CallablePolicy> policies) {
  return [ps = std::move(policies)](nn::Module& m, bool recurse, std::int64_t numel) {
    for (const auto& p : ps)
      if (p(m, recurse, numel)) return true;
    return false;
  };
}

namespace size_based {
nn::ClassSet default_force_leaf_modules() {
  return nn::ClassSet{"MultiheadAttention"};
}
nn::ClassSet default_exclude_wrap_modules() {
  return nn::ClassSet{"ModuleList", "ModuleDict"};
}

bool decide(const nn::Module& module, bool recurse, std::int64_t nonwrapped_numel,
            std::int64_t min_num_params, const nn::ClassSet& force_leaf_modules,
            const nn::ClassSet& exclude_wrap_modules) {
  const bool is_large = nonwrapped_numel >= min_num_params;
  if (recurse) return is_large && !module.isinstance(force_leaf_modules);
  return is_large && !module.isinstance(exclude_wrap_modules);
}
}  // namespace size_based

CallablePolicy size_based_auto_wrap_policy(std::int64_t min_num_params,
                                           std::optional<nn::ClassSet> force_leaf_modules,
                                           std::optional<nn::ClassSet> exclude_wrap_modules) {
  nn::ClassSet leaf = force_leaf_modules ? std::move(*force_leaf_modules)
                                         : size_based::default_force_leaf_modules();
  nn::ClassSet exclude = exclude_wrap_modules ? std::move(*exclude_wrap_modules)
                                              : size_based::default_exclude_wrap_modules();
  // Same decision as size_based::decide, with the class tests memoised.
  return [min_num_params, is_leaf = ClassMatcher(std::move(leaf)),
          is_excluded = ClassMatcher(std::move(exclude))](nn::Module& m, bool recurse,
                                                          std::int64_t numel) {
    const bool is_large = numel >= min_num_params;
    if (recurse) return is_large && !is_leaf(m);
    return is_large && !is_excluded(m);
  };
}

}  // namespace fsdp::policies
