// What the flat pointer tables (pointer_set.h, pointer_index.h) share: the slot count for an
// expected size (a power of two, at most half full) and the hash that spreads aligned addresses.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fsdp::traversal {

inline std::size_t pointer_table_capacity(std::size_t expected) {
  std::size_t c = 16;
  while (c < expected * 2) c *= 2;
  return c;
}

inline std::size_t pointer_hash(const void* p) {
  auto x = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;  // murmur3 finaliser
  x ^= x >> 33;
  return static_cast<std::size_t>(x);
}

}  // namespace fsdp::traversal
