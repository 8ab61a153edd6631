// From a --policy expression (policy_expr.h) to the policies of this folder, so that a policy
// given as text wraps exactly as the same policy built in code: the planner, train_gpt and a
// user's job all go through here.
#pragma once

#include <string>

#include "policies/options.h"
#include "policies/policy_expr.h"

namespace fsdp::policies {

// always -> always_wrap_policy; size(...) -> size_based_auto_wrap_policy; transformer([..]) ->
// transformer_auto_wrap_policy; individually([..]) -> _wrap_module_cls_individually; modules([..])
// -> ModuleWrapPolicy (a Policy object: the _run_policy engine); or(...) -> _or_policy over the
// operands' callable forms.
AutoWrapPolicy build_policy(const PolicyExpr& expr);

// build_policy(parse_policy(text)): a malformed `text` throws InputError naming the column.
AutoWrapPolicy build_policy(const std::string& text);

}  // namespace fsdp::policies
