// A flat open-addressing set of pointers: the visited/memo sets of the traversals. Identity sets
// are on every traversal's hot path; std::unordered_set allocates a node per insert, this does not.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/traversal/pointer_hash.h"

namespace fsdp::traversal {

class PointerSet {
 public:
  explicit PointerSet(std::size_t expected = 64) { rehash(pointer_table_capacity(expected)); }
  // Inserts p (non-null); true when it was not present.
  bool insert(const void* p) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.size() * 2);
    return insert_unchecked(p);
  }
  bool contains(const void* p) const {
    for (std::size_t i = slot_of(p);; i = (i + 1) & mask_) {
      if (slots_[i] == p) return true;
      if (slots_[i] == nullptr) return false;
    }
  }
  std::size_t size() const { return size_; }
  // Empties the set, keeping its capacity.
  void clear() {
    if (size_ == 0) return;
    std::fill(slots_.begin(), slots_.end(), nullptr);
    size_ = 0;
  }

 private:
  std::size_t slot_of(const void* p) const { return pointer_hash(p) & mask_; }
  bool insert_unchecked(const void* p) {
    for (std::size_t i = slot_of(p);; i = (i + 1) & mask_) {
      if (slots_[i] == p) return false;
      if (slots_[i] == nullptr) {
        slots_[i] = p;
        ++size_;
        return true;
      }
    }
  }
  void rehash(std::size_t capacity) {
    std::vector<const void*> old;
    old.swap(slots_);
    slots_.assign(capacity, nullptr);
    mask_ = capacity - 1;
    size_ = 0;
    for (const void* p : old)
      if (p) insert_unchecked(p);
  }
  std::vector<const void*> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace fsdp::traversal
