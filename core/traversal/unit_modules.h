// The modules a wrapper unit owns, walked once: FSDP flattens their parameters into the unit and
// casts their buffers; nested units and ignored modules own their own subtrees.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/module.h"
#include "core/traversal/module_sets.h"

namespace fsdp::traversal {

// `root` and its descendants in pre-order with repeats (upstream's
// named_modules(remove_duplicate=False)), each with its FQN below `root` ("" for `root`); a
// wrapper (is_wrapper: a nested unit) or a module in `ignored` is left out with its subtree.
std::vector<std::pair<nn::Module*, std::string>> unit_own_modules(nn::Module& root,
                                                                  const ModuleSet& ignored);

}  // namespace fsdp::traversal
