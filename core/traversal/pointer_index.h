// A flat open-addressing map from pointers to dense indices (a module's position in a pre-order
// table, say): the lookups of whole-tree passes, without std::unordered_map's node per entry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/traversal/pointer_hash.h"

namespace fsdp::traversal {

class PointerIndex {
 public:
  static constexpr std::int64_t kAbsent = -1;

  explicit PointerIndex(std::size_t expected = 64) { rehash(pointer_table_capacity(expected)); }
  // Maps p (non-null) to index unless p is present; returns the index p maps to.
  std::int64_t insert(const void* p, std::int64_t index) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.size() * 2);
    return insert_unchecked(p, index);
  }
  // The index of p, or kAbsent.
  std::int64_t find(const void* p) const {
    for (std::size_t i = slot_of(p);; i = (i + 1) & mask_) {
      if (slots_[i].key == p) return slots_[i].index;
      if (slots_[i].key == nullptr) return kAbsent;
    }
  }
  std::size_t size() const { return size_; }

 private:
  struct Slot {
    const void* key = nullptr;
    std::int64_t index = kAbsent;
  };
  std::size_t slot_of(const void* p) const { return pointer_hash(p) & mask_; }
  std::int64_t insert_unchecked(const void* p, std::int64_t index) {
    for (std::size_t i = slot_of(p);; i = (i + 1) & mask_) {
      if (slots_[i].key == p) return slots_[i].index;
      if (slots_[i].key == nullptr) {
        slots_[i] = {p, index};
        ++size_;
        return index;
      }
    }
  }
  void rehash(std::size_t capacity) {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    size_ = 0;
    for (const Slot& s : old)
      if (s.key) insert_unchecked(s.key, s.index);
  }
  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace fsdp::traversal
