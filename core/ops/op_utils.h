// Internal helpers shared by the ops in core/ops/ and their CPU kernels: dim wrapping, dtype
// promotion, compute types for 16-bit floats and a coalescing strided iterator over N operands.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "core/autograd.h"
#include "core/kernel_utils.h"
#include "core/kernels/kernel_table.h"
#include "core/ops.h"
#include "core/wrap_dim.h"

namespace fsdp::ops_detail {

using autograd::variable_list;

using fsdp::wrap_dim;  // core/wrap_dim.h
// wrap_dim, for insertion positions (unsqueeze/stack): range [-(ndim+1), ndim].
std::int64_t wrap_insert_dim(std::int64_t dim, std::int64_t ndim, const char* op);

// PyTorch's result_type for two tensors; a 0-d tensor does not raise the dtype of a
// higher-dimensional one within the same category (bool < integer < floating).
DType promote_types(DType a, DType b);
DType result_type(const Tensor& a, const Tensor& b);
int dtype_category(DType t);  // 0 bool, 1 integer, 2 floating

// The arithmetic type a storage type computes in: 16-bit floats compute in float.
template <typename T>
using compute_t =
    std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;
template <typename T>
inline compute_t<T> load(T v) {
  if constexpr (std::is_same_v<T, Half>)
    return half_to_float(v.bits);
  else if constexpr (std::is_same_v<T, BFloat16>)
    return bf16_to_float(v.bits);
  else
    return v;
}
template <typename T, typename C>
inline T store(C v) {
  if constexpr (std::is_same_v<T, Half>)
    return Half{float_to_half(static_cast<float>(v))};
  else if constexpr (std::is_same_v<T, BFloat16>)
    return BFloat16{float_to_bf16(static_cast<float>(v))};
  else if constexpr (std::is_same_v<T, bool>)
    return v != C(0);
  else
    return static_cast<T>(v);
}

// for_each_run: core/kernel_utils.h.
using fsdp::for_each_run;

// Throws RuntimeError naming `op` when `dtype` cannot hold the scalar `value` (torch's "value
// cannot be converted to type ... without overflow"): NaN, an infinity or an out-of-range value
// for an integer dtype, a finite value beyond a float dtype's range. Bool holds anything.
void check_scalar_fits(double value, DType dtype, const char* op, const Shape& shape);

// Refuses an `alpha` that the result dtype `result` cannot take, as torch: a floating alpha with
// integral (or bool) tensors, a bool alpha with non-bool ones; names op, dtypes, shapes and alpha.
void check_alpha(const char* op, DType result, const Scalar& alpha, const Tensor& a,
                 const Tensor& b);

// Sums a gradient down to an input's shape and converts it to the input's dtype.
Tensor reduce_grad(const Tensor& grad, const Shape& shape, DType dtype);

// `t` converted to `dtype` (no copy if it already has it), without autograd.
Tensor as_dtype(const Tensor& t, DType dtype);

// Copies src into dst (same shape, any strides), converting dtypes. No autograd, no version bump.
void copy_strided(const Tensor& dst, const Tensor& src);

// Normalised, deduplicated reduction dims (empty input = all dims).
std::vector<bool> reduction_mask(const std::vector<std::int64_t>& dims, std::int64_t ndim,
                                 const char* op);
Shape reduced_shape(const Shape& shape, const std::vector<bool>& mask, bool keepdim);

}  // namespace fsdp::ops_detail
