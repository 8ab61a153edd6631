// CustomPolicy: a function of each module saying whether to wrap it and with what options.
// false or empty overrides: not wrapped; true: wrapped with the root options; overrides: wrapped
// with the root options merged with them (overrides win). Anything else is upstream's ValueError.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <variant>

#include "policies/policy.h"

namespace fsdp::policies {

// What the lambda returns: a bool, an options dict, or (for ports of Python code that can
// return anything) an invalid value described by its Python repr.
class CustomPolicyResult {
 public:
  struct Invalid {
    std::string repr;  // e.g. "None", "1"
  };
  CustomPolicyResult(bool wrap) : value_(wrap) {}  // NOLINT: implicit
  CustomPolicyResult(WrapperOptions overrides) : value_(std::move(overrides)) {}  // NOLINT
  static CustomPolicyResult invalid(std::string python_repr) {
    return CustomPolicyResult(Invalid{std::move(python_repr)});
  }
  const std::variant<bool, WrapperOptions, Invalid>& value() const { return value_; }

 private:
  explicit CustomPolicyResult(Invalid v) : value_(std::move(v)) {}
  std::variant<bool, WrapperOptions, Invalid> value_;
};

class CustomPolicy : public Policy {
 public:
  using LambdaFn = std::function<CustomPolicyResult(nn::Module&)>;
  explicit CustomPolicy(LambdaFn lambda_fn);
  static std::shared_ptr<CustomPolicy> make(LambdaFn lambda_fn) {
    return std::make_shared<CustomPolicy>(std::move(lambda_fn));
  }

  TargetModules run_policy(const nn::ModulePtr& root, const traversal::ModuleSet& ignored_modules,
                           const WrapperOptions& root_options) const override;
  std::string repr() const override { return "CustomPolicy()"; }

 private:
  LambdaFn lambda_fn_;
};

}  // namespace fsdp::policies
