// isinstance against a class set, memoised per module class. Policies ask it for every module;
// ClassSet::matches compares class names along the ancestry, while a module class is an interned
// object, so its answer can be cached by address. The cache is a small lock-free table (each
// entry one atomic word: the class address with the answer in its low bit), so one policy can be
// used by ranks running as threads.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>

#include "core/module.h"

namespace fsdp::policies {

class ClassMatcher {
 public:
  explicit ClassMatcher(nn::ClassSet classes)
      : classes_(std::move(classes)), cache_(std::make_shared<Cache>()) {}
  bool operator()(const nn::Module& m) const { return matches(m.module_class()); }
  bool matches(const nn::ModuleClass& cls) const;
  const nn::ClassSet& classes() const { return classes_; }

 private:
  static constexpr std::size_t kSlots = 64;
  using Cache = std::array<std::atomic<std::uintptr_t>, kSlots>;
  nn::ClassSet classes_;
  std::shared_ptr<Cache> cache_;  // shared by copies of the policy closure
};

inline bool ClassMatcher::matches(const nn::ModuleClass& cls) const {
  const auto key = reinterpret_cast<std::uintptr_t>(&cls);  // aligned: low bit free
  auto& slot = (*cache_)[(key >> 4) % kSlots];
  const std::uintptr_t entry = slot.load(std::memory_order_relaxed);
  if ((entry & ~std::uintptr_t{1}) == key) return entry & 1;
  const bool result = classes_.matches(cls);
  slot.store(key | static_cast<std::uintptr_t>(result), std::memory_order_relaxed);
  return result;
}

}  // namespace fsdp::policies
