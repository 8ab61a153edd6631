// The convention that marks a module as a wrapper (an FSDP unit, or the planner's recording
// wrapper): a module attribute naming the wrapper's class. The engine and the policies detect
// "already wrapped" modules through it without knowing any wrapper type (core never includes
// fsdp/).
#pragma once

#include <string>

#include "core/module.h"

namespace fsdp::traversal {

// Attribute key; its value is a std::string with the wrapper's class name.
inline constexpr const char* kWrapperClassAttr = "_wrapper_class";

// Marks `wrapper` as an instance of wrapper class `cls` (e.g. "FullyShardedDataParallel").
void mark_as_wrapper(nn::Module& wrapper, const std::string& cls);
// The wrapper class of `m`, or null when `m` is not a wrapper.
const std::string* wrapper_class(const nn::Module& m);
inline bool is_wrapper(const nn::Module& m) {
  return wrapper_class(m) != nullptr;
}

}  // namespace fsdp::traversal
