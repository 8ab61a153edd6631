// Ignored modules and parameters as the policies see them: the ignored-module set closed under
// descendants (policies only test membership, so the closure must happen before them).
#pragma once

#include <vector>

#include "core/module.h"
#include "core/traversal/module_sets.h"

namespace fsdp::policies {

// {child for m in ignored for child in m.modules() if child is not a wrapper}, validated as
// upstream's `_get_ignored_modules` does: a wrapper in the list is a ValueError; ignoring the root
// itself warns (all its parameters would be ignored).
traversal::ModuleSet close_ignored_modules(const nn::ModulePtr& root,
                                           const std::vector<nn::ModulePtr>& ignored_modules);

// The parameters of the ignored modules (each module's parameters(), recursively).
traversal::ParamSet ignored_params_of(const nn::ModulePtr& root,
                                      const traversal::ModuleSet& ignored);

}  // namespace fsdp::policies
