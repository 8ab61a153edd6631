// Helpers shared by the torch.nn.functional kernels: compute dtypes, contiguous compute copies,
// dim wrapping and device checks. Internal to core/functional.
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

// Rows of n elements per intra-op thread chunk (core/parallel.h): about kParallelGrain elements.
inline std::int64_t row_grain(std::int64_t n) {
  return std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(n, 1));
}

inline bool is_16bit_float(DType d) {
  return d == DType::Float16 || d == DType::BFloat16;
}

// An element-wise kernel over contiguous 16-bit tensors of dtype `d`, computed in float32 a
// chunk at a time: each chunk of the inputs is converted into a small buffer, `body(ins, out,
// len)` computes `len` float32 outputs from the float32 inputs ins[0..N), and they are rounded
// into `out`. One pass over memory, no float32 copies of whole tensors.
template <std::size_t N, typename Body>
void map_16bit(DType d, const std::array<const std::uint16_t*, N>& in, std::uint16_t* out,
               std::int64_t n, Body body) {
  constexpr std::int64_t kChunk = 2048;
  alignas(64) float bin[N][kChunk];
  alignas(64) float bout[kChunk];
  std::array<const float*, N> ins;
  for (std::size_t k = 0; k < N; ++k) ins[k] = bin[k];
  for (std::int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const std::int64_t len = std::min(kChunk, n - i0);
    for (std::size_t k = 0; k < N; ++k)
      convert_contiguous(bin[k], DType::Float32, in[k] + i0, d, len);
    body(ins, bout, len);
    convert_contiguous(out + i0, d, bout, DType::Float32, len);
  }
}

// For 16-bit tensors: fn(r0, rows, a, b, c) over blocks of about 16K elements of whole rows
// (at least one row), with three float32 scratch buffers of rows * n elements each.
template <typename F>
void for_row_blocks(std::int64_t m, std::int64_t n, F fn) {
  const std::int64_t rb =
      std::max<std::int64_t>(1, (std::int64_t(1) << 14) / std::max<std::int64_t>(n, 1));
  thread_local std::vector<float> a, b, c;
  const auto size = static_cast<std::size_t>(std::min(rb, m) * n);
  a.resize(size);
  b.resize(size);
  c.resize(size);
  for (std::int64_t r0 = 0; r0 < m; r0 += rb)
    fn(r0, std::min(rb, m - r0), a.data(), b.data(), c.data());
}

inline Tensor meta_empty(const Shape& shape, DType d) {
  return empty(shape, TensorOptions(d, kMeta));
}

// True if some defined tensor is on the meta device; otherwise checks they are all on the cpu.
inline bool any_meta(std::initializer_list<const Tensor*> ts, const char* op) {
  bool meta = false;
  for (const Tensor* t : ts)
    if (t->defined() && t->is_meta()) meta = true;
  if (meta) return true;
  for (const Tensor* t : ts)
    if (t->defined()) check_cpu(*t, op);
  return false;
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

// A gradient in `d`, possibly undefined (= zero) in the graph: returns zeros of `shape` then.
inline Tensor grad_or_zeros(const Tensor& g, const Shape& shape, DType d) {
  return g.defined() ? contiguous_as(g, d) : zeros(shape, TensorOptions(d));
}

// Data pointer of an optional tensor (weight, bias): null when undefined.
template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace fsdp::functional
