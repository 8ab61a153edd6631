// What the planner knows about torch.nn's classes: their ancestors, for model files whose
// modules carry a class name but no "bases".
#pragma once

#include <string>
#include <vector>

namespace fsdp::plan {

// The ancestors of a torch.nn class, nearest first, ending with "Module" (e.g. BatchNorm1d:
// {"_BatchNorm", "_NormBase", "Module"}); {"Module"} for classes torch.nn does not define.
const std::vector<std::string>& known_bases(const std::string& type);

// Whether `type` is a class of torch.nn (or one of its private bases such as _BatchNorm).
bool is_known_class(const std::string& type);

}  // namespace fsdp::plan
