// Checked int64 arithmetic for the planner's sums, products and byte counts: a model or a world
// size whose numbers do not fit in int64 is an input error naming the quantity, never a wrong
// number printed with exit status 0.
#pragma once

#include <fmt/format.h>

#include <cstdint>

#include "tools/plan/model_file.h"

namespace fsdp::plan {

inline std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    throw InputError(fmt::format("{} does not fit in 64 bits ({} + {})", what, a, b));
  return r;
}

inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    throw InputError(fmt::format("{} does not fit in 64 bits ({} * {})", what, a, b));
  return r;
}

// a += b, checked.
inline void add_to(std::int64_t& a, std::int64_t b, const char* what) {
  a = checked_add(a, b, what);
}

}  // namespace fsdp::plan
