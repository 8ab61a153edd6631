// Helpers shared by the torch.nn.functional ops: compute dtypes, contiguous compute copies, dim
// wrapping, row layouts. Internal to core/functional (their CPU kernels' helpers:
// core/kernels/cpu/row_kernels.h).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/dtype_convert.h"
#include "core/kernel_utils.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "core/wrap_dim.h"

namespace fsdp::functional {

// float16/bfloat16 compute in float32; float32/float64 natively.
inline DType compute_dtype(DType d) {
  return d == DType::Float16 || d == DType::BFloat16 ? DType::Float32 : d;
}

// Throws TypeError unless `t` has a floating dtype.
inline void check_floating(const Tensor& t, const char* op, const char* what) {
  FSDP_CHECK(is_floating(t.dtype()), TypeError,
             "{}: expected a floating-point {} (float32, float64, float16 or bfloat16), got {} "
             "of shape {}",
             op, what, dtype_name(t.dtype()), shape_str(t.shape()));
}

// A detached, contiguous tensor holding `t`'s values in dtype `d` (no copy when it already is).
inline Tensor contiguous_as(const Tensor& t, DType d) {
  if (t.dtype() == d && t.is_contiguous()) return t.detach();
  Tensor out = empty(t.shape(), TensorOptions(d, t.device()));
  out.copy_(t.detach());
  return out;
}

// `t` contiguous in its compute dtype (float32 for 16-bit floats).
inline Tensor compute_input(const Tensor& t) {
  return contiguous_as(t, compute_dtype(t.dtype()));
}

// Converts a computed result back to the caller's dtype (no copy when equal).
inline Tensor to_result_dtype(const Tensor& t, DType d) {
  if (t.dtype() == d) return t;
  Tensor out = empty(t.shape(), TensorOptions(d, t.device()));
  out.copy_(t);
  return out;
}

inline bool is_16bit_float(DType d) {
  return d == DType::Float16 || d == DType::BFloat16;
}

inline Tensor meta_empty(const Shape& shape, DType d) {
  return empty(shape, TensorOptions(d, kMeta));
}

using fsdp::wrap_dim;  // core/wrap_dim.h

// Sizes of a tensor split around `dim`: (product before, size of dim, product after).
struct RowLayout {
  std::int64_t outer = 1, n = 1, inner = 1;
};
inline RowLayout row_layout(const Shape& shape, std::int64_t dim) {
  RowLayout l;
  if (shape.empty()) return l;
  for (std::int64_t i = 0; i < dim; ++i) l.outer *= shape[static_cast<std::size_t>(i)];
  l.n = shape[static_cast<std::size_t>(dim)];
  for (std::size_t i = static_cast<std::size_t>(dim) + 1; i < shape.size(); ++i)
    l.inner *= shape[i];
  return l;
}

}  // namespace fsdp::functional
