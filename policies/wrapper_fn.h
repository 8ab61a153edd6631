// The function that builds a wrapper around one module: FSDP's constructor, or the planner's
// recording wrapper (upstream's `wrapper_cls` / `fsdp_fn`).
#pragma once

#include <functional>

#include "policies/options.h"

namespace fsdp::policies {

using WrapperFn = std::function<nn::ModulePtr(nn::ModulePtr module, const WrapperOptions& options)>;

// Attribute holding a module's own wrap overrides (a WrapperOptions), which win over every other
// source when the module is wrapped through `wrap_module` (upstream's `module._wrap_overrides`).
inline constexpr const char* kWrapOverridesAttr = "_wrap_overrides";

// Upstream's `_wrap(module, wrapper_cls, **kwargs)`: wrapper_cls(module, **{**kwargs,
// **module._wrap_overrides}).
nn::ModulePtr wrap_module(const nn::ModulePtr& module, const WrapperFn& wrapper_cls,
                          const WrapperOptions& options);

}  // namespace fsdp::policies
