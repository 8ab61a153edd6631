// The convention that marks a module as a wrapper (an FSDP unit, or the planner's recording
// wrapper): the module carries the interned name of its wrapper class. The engine and the policies
// detect "already wrapped" modules through it without knowing any wrapper type (core never
// includes fsdp/).
#pragma once

#include <string>

#include "core/module.h"

namespace fsdp::traversal {

// Marks `wrapper` as an instance of wrapper class `cls` (e.g. "FullyShardedDataParallel").
void mark_as_wrapper(nn::Module& wrapper, const std::string& cls);
// The wrapper class of `m`, or null when `m` is not a wrapper.
inline const std::string* wrapper_class(const nn::Module& m) {
  return m.wrapper_mark();
}
inline bool is_wrapper(const nn::Module& m) {
  return wrapper_class(m) != nullptr;
}

// What indexing and iterating `m` reach, as a wrapper's __getitem__ forwards them: for a wrapper,
// the module it wraps (its one child), recursively; otherwise `m`. Code that runs a container's
// modules iterates `unwrapped(*child("layers")).child_slots()`, so FSDP(ModuleList) runs the
// list's modules (their units) and is itself never called, as upstream.
const nn::Module& unwrapped(const nn::Module& m);

}  // namespace fsdp::traversal
