// The units of a tree and the modules a wrapper unit owns, each walked once: FSDP flattens the
// own modules' parameters into the unit and casts their buffers; nested units and ignored modules
// own their own subtrees.
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

// The wrappers (is_wrapper: the units) of `root`'s tree, `root` included when it is one, in
// named_modules' order (pre-order, each once), with their FQNs from `root`.
std::vector<std::pair<std::string, nn::Module*>> named_units(nn::Module& root);

}  // namespace fsdp::traversal
