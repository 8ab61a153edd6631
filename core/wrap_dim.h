// Python-style dimension wrapping, with PyTorch's message: every op, functional and Tensor
// accessor wraps a dim through this one function.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/error.h"

namespace fsdp {

// dim in [-ndim, ndim) becomes [0, ndim); a 0-d tensor accepts 0 and -1, as torch's do.
inline std::int64_t wrap_dim(std::int64_t dim, std::int64_t ndim, const char* op) {
  const std::int64_t n = std::max<std::int64_t>(ndim, 1);
  FSDP_CHECK(dim >= -n && dim < n, IndexError,
             "{}: Dimension out of range (expected to be in range of [{}, {}], but got {})", op, -n,
             n - 1, dim);
  return dim < 0 ? dim + n : dim;
}

}  // namespace fsdp
