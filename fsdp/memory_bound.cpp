#include "fsdp/memory_bound.h"

#include <algorithm>

#include "core/error.h"
#include "fsdp/sharding.h"

namespace fsdp {

namespace {
// The planner's models can be large enough to overflow: say which sum, as checked_math does.
std::int64_t add(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r = 0;
  FSDP_CHECK(!__builtin_add_overflow(a, b, &r), ValueError, "{} does not fit in 64 bits ({} + {})",
             what, a, b);
  return r;
}
}  // namespace

std::int64_t peak_unsharded_bytes(const std::vector<UnshardedUnit>& units) {
  std::int64_t peak = 0;
  std::vector<std::int64_t> transient;  // freed after forward and after backward
  for (const auto& u : units) {
    if (frees_after_forward(u.strategy, u.is_root))
      transient.push_back(u.bytes);
    else
      peak = add(peak, u.bytes, "the peak unsharded bytes");  // kept to backward
  }
  const auto two = transient.begin() + std::min<std::ptrdiff_t>(2, std::ssize(transient));
  std::partial_sort(transient.begin(), two, transient.end(), std::greater<>());
  for (auto it = transient.begin(); it != two; ++it)
    peak = add(peak, *it, "the peak unsharded bytes");
  return peak;
}

std::int64_t memory_bound_bytes(std::int64_t shard_bytes, std::int64_t peak_unsharded,
                                std::int64_t activation_bytes) {
  const char* what = "the peak bytes with activations";
  return add(add(shard_bytes, peak_unsharded, what), activation_bytes, what);
}

}  // namespace fsdp
