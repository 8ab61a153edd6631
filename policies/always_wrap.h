// always_wrap_policy: recurse everywhere and wrap every non-ignored submodule.
#pragma once

#include <cstdint>

#include "policies/options.h"

namespace fsdp::policies {

inline bool always_wrap_policy(nn::Module&, bool /*recurse*/, std::int64_t /*nonwrapped_numel*/) {
  return true;
}

}  // namespace fsdp::policies
