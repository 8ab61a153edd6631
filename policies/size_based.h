// size_based_auto_wrap_policy: recurse into / wrap a module when its not-yet-wrapped parameter
// numel is at least min_num_params (inclusive), except that force-leaf modules are neither
// recursed into nor wrapped (their parameters fall to the nearest wrapped ancestor) and
// exclude-wrap containers are recursed into but never wrapped.
#pragma once

#include <cstdint>
#include <optional>

#include "policies/options.h"

namespace fsdp::policies {

namespace size_based {
// Upstream's size_based_auto_wrap_policy.FORCE_LEAF_MODULES: {MultiheadAttention}.
nn::ClassSet default_force_leaf_modules();
// Upstream's size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES: {ModuleList, ModuleDict}.
nn::ClassSet default_exclude_wrap_modules();
inline constexpr std::int64_t kDefaultMinNumParams = 100'000'000;  // int(1e8)

// The decision itself; a given set replaces the default (extend with default_...().united()).
bool decide(const nn::Module& module, bool recurse, std::int64_t nonwrapped_numel,
            std::int64_t min_num_params, const nn::ClassSet& force_leaf_modules,
            const nn::ClassSet& exclude_wrap_modules);
}  // namespace size_based

// functools.partial(size_based_auto_wrap_policy, min_num_params=..., force_leaf_modules=...,
// exclude_wrap_modules=...); nullopt selects the defaults.
CallablePolicy size_based_auto_wrap_policy(
    std::int64_t min_num_params = size_based::kDefaultMinNumParams,
    std::optional<nn::ClassSet> force_leaf_modules = std::nullopt,
    std::optional<nn::ClassSet> exclude_wrap_modules = std::nullopt);

}  // namespace fsdp::policies
