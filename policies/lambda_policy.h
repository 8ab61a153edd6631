// lambda_auto_wrap_policy: always recurse; wrap a module when lambda_fn(module) is true.
#pragma once

#include <functional>

#include "policies/options.h"

namespace fsdp::policies {

using ModulePredicate = std::function<bool(nn::Module&)>;

// functools.partial(lambda_auto_wrap_policy, lambda_fn=...).
CallablePolicy lambda_auto_wrap_policy(ModulePredicate lambda_fn);

}  // namespace fsdp::policies
