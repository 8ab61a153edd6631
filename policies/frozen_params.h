// Frozen-parameter validation (upstream's `_validate_frozen_params`): every unit to be built
// should manage only frozen or only trainable parameters. Mixed units are a ValueError when
// use_orig_params is false and a UserWarning (one per offending unit) when it is true.
#pragma once

#include "core/module.h"
#include "core/traversal/module_sets.h"

namespace fsdp::policies {

void validate_frozen_params(const nn::ModulePtr& root, const traversal::ModuleSet& modules_to_wrap,
                            const traversal::ParamSet& ignored_params, bool use_orig_params);

}  // namespace fsdp::policies
