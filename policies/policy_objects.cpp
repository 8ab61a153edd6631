// TargetModules, ModuleWrapPolicy and CustomPolicy.
#include <fmt/format.h>

#include "core/error.h"
#include "core/traversal/pre_order.h"
#include "policies/class_matcher.h"
#include "policies/custom_policy.h"
#include "policies/module_wrap_policy.h"
#include "policies/transformer_policy.h"

namespace fsdp::policies {

WrapperOptions* TargetModules::find(const nn::Module* m) {
  auto it = index_.find(m);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

const WrapperOptions* TargetModules::find(const nn::Module* m) const {
  auto it = index_.find(m);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void TargetModules::set(const nn::ModulePtr& m, WrapperOptions options) {
  auto [it, inserted] = index_.emplace(m.get(), entries_.size());
  if (inserted)
    entries_.emplace_back(m, std::move(options));
  else
    entries_[it->second].second = std::move(options);
}

traversal::ModuleSet TargetModules::keys() const {
  traversal::ModuleSet out;
  out.reserve(entries_.size());
  for (const auto& [m, o] : entries_) out.insert(m.get());
  return out;
}

ModuleWrapPolicy::ModuleWrapPolicy(nn::ClassSet module_classes)
    : module_classes_(std::move(module_classes)) {}

TargetModules ModuleWrapPolicy::run_policy(const nn::ModulePtr& root,
                                           const traversal::ModuleSet& ignored_modules,
                                           const WrapperOptions& root_options) const {
  TargetModules targets;
  for (const auto& module :
       traversal::modules_of(root)) {  // pre-order, shared modules once, root included
    if (traversal::contains(ignored_modules, module.get())) continue;
    if (module->isinstance(module_classes_)) targets.set(module, root_options);  // a copy each
  }
  return targets;
}

bool ModuleWrapPolicy::operator()(nn::Module& module, bool recurse, std::int64_t) const {
  return module_wrap_decision(module, recurse, module_classes_);
}

CallablePolicy ModuleWrapPolicy::as_callable() const {
  return [is_member = ClassMatcher(module_classes_)](nn::Module& m, bool recurse, std::int64_t) {
    return recurse || is_member(m);
  };
}

std::string ModuleWrapPolicy::repr() const {
  return "ModuleWrapPolicy(" + module_classes_.str() + ")";
}

CustomPolicy::CustomPolicy(LambdaFn lambda_fn) : lambda_fn_(std::move(lambda_fn)) {}

namespace {
bool has_any_field(const WrapperOptions& o) {
  return !(o == WrapperOptions{});
}
}  // namespace

TargetModules CustomPolicy::run_policy(const nn::ModulePtr& root,
                                       const traversal::ModuleSet& ignored_modules,
                                       const WrapperOptions& root_options) const {
  TargetModules targets;
  for (const auto& module : traversal::modules_of(root)) {
    if (traversal::contains(ignored_modules, module.get())) continue;
    CustomPolicyResult res = lambda_fn_(*module);
    const auto& v = res.value();
    if (const auto* bad = std::get_if<CustomPolicyResult::Invalid>(&v))
      throw ValueError(fmt::format(
          "The lambda_fn passed to CustomPolicy should return False/True or a kwarg dict, but it "
          "returned {}",
          bad->repr));
    if (const bool* wrap = std::get_if<bool>(&v)) {
      if (*wrap) targets.set(module, root_options);
      continue;
    }
    const auto& overrides = std::get<WrapperOptions>(v);
    if (!has_any_field(overrides)) continue;  // an empty dict is falsy: not wrapped
    targets.set(module, root_options.merged(overrides));
  }
  return targets;
}

}  // namespace fsdp::policies
