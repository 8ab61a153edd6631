// Python's attribute and index forwarding through wrappers, and FQN cleaning.
// FSDP's __getattr__/__getitem__ forward what the wrapper lacks to the wrapped module, so that
// `fsdp.bn1` and `fsdp[0]` reach the original children; FQNs under a wrapper contain the
// `_fsdp_wrapped_module.` segment, which state dicts and parameter names drop.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/module.h"

namespace fsdp {

// getattr(module, name) for child modules: the module's own child slot, else (for an FSDP
// wrapper) the wrapped module's, recursively. KeyError when none has it.
nn::ModulePtr getattr(const nn::ModulePtr& module, const std::string& name);
// module[index] for Sequential/ModuleList (negative indices count from the end), forwarded
// through FSDP wrappers. IndexError when out of range.
nn::ModulePtr getitem(const nn::ModulePtr& module, std::int64_t index);

// Removes every "_fsdp_wrapped_module." and "_checkpoint_wrapped_module." segment.
std::string clean_tensor_name(const std::string& name);
// A state dict key: `name` under the module at `prefix`, joined, then cleaned, as upstream's
// hooks clean each key (a unit inside a CheckpointWrapper has a prefix ending in the segment,
// which only the joined key shows with its dot).
std::string state_dict_key(const std::string& prefix, const std::string& name);
// named_parameters() with cleaned FQNs.
std::vector<std::pair<std::string, Tensor>> clean_named_parameters(nn::Module& module);

}  // namespace fsdp
