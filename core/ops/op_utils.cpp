#include "core/ops/op_utils.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fsdp {
namespace ops_detail {

std::int64_t wrap_insert_dim(std::int64_t dim, std::int64_t ndim, const char* op) {
  return wrap_dim(dim, ndim + 1, op);
}

void check_scalar_fits(double value, DType dtype, const char* op, const Shape& shape) {
  double lo = 0, hi = 0;  // the range of finite values; integers also refuse NaN and infinities
  switch (dtype) {
    case DType::Bool:
    case DType::Float64:
      return;
    case DType::Float32:
      hi = std::numeric_limits<float>::max();
      break;
    case DType::BFloat16:
      hi = 0x1.fep127;  // the largest finite bfloat16
      break;
    case DType::Float16:
      hi = 65504.0;
      break;
    case DType::Int64:
      lo = -0x1p63, hi = 0x1p63;  // [-2^63, 2^63): 2^63 itself overflows
      break;
    case DType::Int32:
      lo = std::numeric_limits<std::int32_t>::min(), hi = std::numeric_limits<std::int32_t>::max();
      break;
    case DType::UInt8:
      hi = 255;
      break;
  }
  if (is_floating(dtype)) lo = -hi;
  const bool fits = is_floating(dtype) ? !std::isfinite(value) || (value >= lo && value <= hi)
                                       : std::isfinite(value) && value >= lo &&
                                             (dtype == DType::Int64 ? value < hi : value <= hi);
  FSDP_CHECK(fits, RuntimeError,
             "{}: value {} cannot be converted to {} without overflow (tensor shape {})", op, value,
             dtype_name(dtype), shape_str(shape));
}

void check_alpha(const char* op, DType result, const Scalar& alpha, const Tensor& a,
                 const Tensor& b) {
  const bool bool_ok = !alpha.is_bool() || result == DType::Bool;
  const bool float_ok = is_floating(result) || !alpha.is_floating_point();
  FSDP_CHECK(bool_ok && float_ok, RuntimeError,
             "{}: {} (dtypes {} and {}, shapes {} and {}, alpha {})", op,
             !bool_ok
                 ? "a bool alpha is only supported for bool results"
                 : "for integral input tensors, argument alpha must not be a floating point number",
             dtype_name(a.dtype()), dtype_name(b.dtype()), shape_str(a.shape()),
             shape_str(b.shape()), alpha.str());
}

int dtype_category(DType t) {
  if (t == DType::Bool) return 0;
  return is_floating(t) ? 2 : 1;
}

static int dtype_rank(DType t) {
  switch (t) {
    case DType::Bool:
      return 0;
    case DType::UInt8:
      return 1;
    case DType::Int32:
      return 2;
    case DType::Int64:
      return 3;
    case DType::Float16:
      return 4;
    case DType::BFloat16:
      return 4;
    case DType::Float32:
      return 5;
    case DType::Float64:
      return 6;
  }
  return 0;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  // float16 with bfloat16 has no common 16-bit type.
  if ((a == DType::Float16 && b == DType::BFloat16) ||
      (a == DType::BFloat16 && b == DType::Float16))
    return DType::Float32;
  return dtype_rank(a) >= dtype_rank(b) ? a : b;
}

DType result_type(const Tensor& a, const Tensor& b) {
  DType da = a.dtype(), db = b.dtype();
  bool za = a.dim() == 0, zb = b.dim() == 0;
  if (za != zb) {
    // A 0-d tensor only matters when it is of a higher category.
    const DType& dim_t = za ? db : da;
    const DType& zero_t = za ? da : db;
    if (dtype_category(zero_t) <= dtype_category(dim_t)) return dim_t;
    return zero_t;
  }
  return promote_types(da, db);
}

Tensor reduce_grad(const Tensor& grad, const Shape& shape, DType dtype) {
  if (!grad.defined()) return grad;
  Tensor g = grad.shape() == shape ? grad : sum_to(grad, shape);
  if (g.dtype() != dtype && is_floating(dtype)) g = to_dtype(g, dtype);
  return g;
}

Tensor as_dtype(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  autograd::NoGradGuard ng;
  Tensor out = empty(t.shape(), TensorOptions(dtype, t.device()));
  if (!t.is_meta()) out.copy_(t);
  return out;
}

std::vector<bool> reduction_mask(const std::vector<std::int64_t>& dims, std::int64_t ndim,
                                 const char* op) {
  std::vector<bool> mask(static_cast<std::size_t>(ndim), dims.empty());
  for (auto d : dims) {
    auto w = static_cast<std::size_t>(wrap_dim(d, ndim, op));
    if (ndim == 0) continue;
    FSDP_CHECK(!mask[w], RuntimeError, "{}: dim {} appears multiple times in the list of dims", op,
               w);
    mask[w] = true;
  }
  return mask;
}

Shape reduced_shape(const Shape& shape, const std::vector<bool>& mask, bool keepdim) {
  Shape out;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (!mask[i])
      out.push_back(shape[i]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

}  // namespace ops_detail

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    FSDP_CHECK(da == db || da == 1 || db == 1, RuntimeError,
               "{}: shapes {} and {} cannot be broadcast together (the size of tensor a ({}) "
               "must match the size of tensor b ({}) at non-singleton dimension {})",
               op, shape_str(a), shape_str(b), da, db, i);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace fsdp
