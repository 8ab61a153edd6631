// `_or_policy`: true when any policy (in list order, short-circuit) is true, for recursing and
// for wrapping alike. An always-recursing member therefore makes the whole policy recurse
// everywhere (it defeats size_based's force-leaf modules) — upstream behaviour, kept.
#pragma once

#include <vector>

#include "policies/options.h"

namespace fsdp::policies {

// functools.partial(_or_policy, policies=[...]).
CallablePolicy or_policy(std::vector<CallablePolicy> policies);

}  // namespace fsdp::policies
