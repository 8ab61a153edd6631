#include "policies/policy_build.h"

#include "policies/always_wrap.h"
#include "policies/module_cls_individually.h"
#include "policies/module_wrap_policy.h"
#include "policies/or_policy.h"
#include "policies/size_based.h"
#include "policies/transformer_policy.h"

namespace fsdp::policies {

namespace {

nn::ClassSet class_set(const std::vector<ClassRef>& refs) {
  nn::ClassSet s;
  for (const auto& r : refs) s.insert(r.name);
  return s;
}

std::optional<nn::ClassSet> optional_set(const std::optional<std::vector<ClassRef>>& refs) {
  if (!refs) return std::nullopt;
  return class_set(*refs);
}

}  // namespace

AutoWrapPolicy build_policy(const PolicyExpr& e) {
  using K = PolicyExpr::Kind;
  switch (e.kind) {
    case K::Always:
      return CallablePolicy(always_wrap_policy);
    case K::Size:
      return size_based_auto_wrap_policy(e.min_num_params, optional_set(e.force_leaf),
                                         optional_set(e.exclude_wrap));
    case K::Transformer:
      return transformer_auto_wrap_policy(class_set(e.classes));
    case K::Individually:
      return wrap_module_cls_individually(class_set(e.classes));
    case K::Modules:
      return ModuleWrapPolicy::make(class_set(e.classes));
    case K::Or: {
      // _or_policy calls its members as callables; ModuleWrapPolicy has a callable form.
      std::vector<CallablePolicy> members;
      for (const auto& op : e.operands) members.push_back(build_policy(op).callable());
      return or_policy(std::move(members));
    }
  }
  return {};
}

AutoWrapPolicy build_policy(const std::string& text) {
  return build_policy(parse_policy(text));
}

}  // namespace fsdp::policies
