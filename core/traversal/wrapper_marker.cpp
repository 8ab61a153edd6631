#include "core/traversal/wrapper_marker.h"

#include <mutex>
#include <unordered_set>

namespace fsdp::traversal {

namespace {
// Wrapper class names live for the whole program (a handful of them), so a module holds a pointer.
const std::string* intern(const std::string& name) {
  static std::mutex mutex;
  static std::unordered_set<std::string> names;  // node-based: addresses are stable
  std::lock_guard lock(mutex);
  return &*names.insert(name).first;
}
}  // namespace

void mark_as_wrapper(nn::Module& wrapper, const std::string& cls) {
  thread_local const std::string* last = nullptr;  // wrappers of one class come in runs
  if (!last || *last != cls) last = intern(cls);
  wrapper.set_wrapper_mark(last);
}

const nn::Module& unwrapped(const nn::Module& m) {
  const nn::Module* out = &m;
  while (is_wrapper(*out)) {
    const nn::Module* wrapped = nullptr;
    int occupied = 0;
    for (const auto& [name, child] : out->child_slots())
      if (child) {
        wrapped = child.get();
        ++occupied;
      }
    if (occupied != 1) break;
    out = wrapped;
  }
  return *out;
}

}  // namespace fsdp::traversal
