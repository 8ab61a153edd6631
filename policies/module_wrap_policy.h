// ModuleWrapPolicy: wrap every (non-ignored) instance of the given classes, each with a copy of
// the root options. It also has a callable form, so it runs in either engine.
#pragma once

#include <memory>

#include "policies/policy.h"

namespace fsdp::policies {

class ModuleWrapPolicy : public Policy {
 public:
  explicit ModuleWrapPolicy(nn::ClassSet module_classes);
  static std::shared_ptr<ModuleWrapPolicy> make(nn::ClassSet module_classes) {
    return std::make_shared<ModuleWrapPolicy>(std::move(module_classes));
  }

  TargetModules run_policy(const nn::ModulePtr& root, const traversal::ModuleSet& ignored_modules,
                           const WrapperOptions& root_options) const override;
  // `__call__`: if recurse, true; else isinstance (nonwrapped_numel is not used).
  CallablePolicy as_callable() const override;
  bool operator()(nn::Module& module, bool recurse, std::int64_t nonwrapped_numel) const;
  std::string repr() const override;
  const nn::ClassSet& module_classes() const { return module_classes_; }

 private:
  nn::ClassSet module_classes_;
};

}  // namespace fsdp::policies
