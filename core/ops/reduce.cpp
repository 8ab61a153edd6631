// Reductions: sum, mean, max (all / along a dim with indices), amax, argmax, sum_to.
#include "core/dispatch/intercept.h"
#include "core/ops/op_utils.h"

namespace fsdp {
using namespace ops_detail;

namespace {

std::int64_t reduced_count(const Shape& shape, const std::vector<bool>& mask) {
  std::int64_t n = 1;
  for (std::size_t i = 0; i < shape.size(); ++i)
    if (mask[i]) n *= shape[i];
  return n;
}

// Sum (or mean) of `a` over the dims in `mask`.
Tensor sum_impl(const char* op, const Tensor& a, const std::vector<bool>& mask, bool keepdim,
                bool mean) {
  const Device dev = common_device(op, {&a});
  DType out_dtype = is_floating(a.dtype()) ? a.dtype() : DType::Int64;
  FSDP_CHECK(!mean || is_floating(a.dtype()), RuntimeError,
             "mean(): could not infer output dtype. Input dtype must be either a floating point "
             "or complex dtype. Got: {} (shape {})",
             dtype_name(a.dtype()), shape_str(a.shape()));
  Tensor out = new_tensor(reduced_shape(a.shape(), mask, keepdim), out_dtype, dev);
  const std::int64_t count = reduced_count(a.shape(), mask);
  if (!dev.is_meta()) kernels(dev).sum(out, a, mask, mean, count);
  // Backward: broadcast the gradient back over the reduced dims (materialised, so a leaf
  // never receives a stride-0 gradient).
  autograd::record(mean ? "MeanBackward1" : "SumBackward1", {a}, {out}, {},
                   [s = a.shape(), mask, keepdim, mean, count](
                       const variable_list&, const variable_list& g) -> variable_list {
                     Tensor gk = keepdim ? g[0] : reshape(g[0], reduced_shape(s, mask, true));
                     if (mean) gk = div(gk, static_cast<double>(count));
                     return {contiguous(expand(gk, s))};
                   });
  return out;
}

// amax over the dims in mask (NaN propagates).
Tensor amax_impl(const char* op, const Tensor& a, const std::vector<bool>& mask, bool keepdim) {
  const Device dev = common_device(op, {&a});
  for (std::size_t i = 0; i < mask.size(); ++i)
    FSDP_CHECK(!mask[i] || a.shape()[i] > 0, IndexError,
               "{}(): Expected reduction dim {} to have non-zero size (tensor shape {})", op, i,
               shape_str(a.shape()));
  FSDP_CHECK(a.numel() > 0 || !mask.empty(), RuntimeError,
             "{}(): Expected reduction dim to be specified for input.numel() == 0.", op);
  Tensor out = new_tensor(reduced_shape(a.shape(), mask, keepdim), a.dtype(), dev);
  if (dev.is_meta() || a.numel() == 0) return out;
  kernels(dev).amax(out, a, mask);
  return out;
}

// How a NaN maximum's gradient is split, as torch's two backwards do: max() gives it to the NaN
// elements (evenly_distribute_backward); amax multiplies g / count by the mask of elements equal
// to the result, none for NaN, so that slice's gradient is NaN (scale_grad_by_count).
enum class NanMaximum { ToNanElements, NanGradient };

// Gradient of an extremum that splits evenly between tied maxima.
Tensor evenly_distribute(const Tensor& input, const Tensor& out_keep, const Tensor& g_keep,
                         const std::vector<bool>& mask, NanMaximum nan) {
  Tensor hit = eq(input, out_keep);
  if (nan == NanMaximum::ToNanElements)
    hit = where(ne(out_keep, out_keep), ne(input, input), hit);  // x != x: x is NaN
  std::vector<std::int64_t> dims;
  for (std::size_t i = 0; i < mask.size(); ++i)
    if (mask[i]) dims.push_back(static_cast<std::int64_t>(i));
  Tensor count = dims.empty() ? to_dtype(hit, DType::Int64) : sum(hit, dims, true);
  Tensor share = div(g_keep, count);
  if (nan == NanMaximum::NanGradient) return mul(share, hit);
  return where(hit, share, zeros({}, TensorOptions(share.dtype(), share.device())));
}

}  // namespace

Tensor sum(const Tensor& a, const std::vector<std::int64_t>& dims, bool keepdim) {
  FSDP_DISPATCH("sum", sum, a, dims, keepdim);
  return sum_impl("sum", a, reduction_mask(dims, a.dim(), "sum"), keepdim, false);
}

Tensor mean(const Tensor& a, const std::vector<std::int64_t>& dims, bool keepdim) {
  FSDP_DISPATCH("mean", mean, a, dims, keepdim);
  return sum_impl("mean", a, reduction_mask(dims, a.dim(), "mean"), keepdim, true);
}

Tensor amax(const Tensor& a, const std::vector<std::int64_t>& dims, bool keepdim) {
  FSDP_DISPATCH("amax", amax, a, dims, keepdim);
  auto mask = reduction_mask(dims, a.dim(), "amax");
  Tensor out = amax_impl("amax", a, mask, keepdim);
  autograd::record(
      "AmaxBackward0", {a}, {out}, {a, out},
      [mask, keepdim](const variable_list& s, const variable_list& g) -> variable_list {
        Shape keep = reduced_shape(s[0].shape(), mask, true);
        Tensor ok = keepdim ? s[1] : reshape(s[1], keep);
        Tensor gk = keepdim ? g[0] : reshape(g[0], keep);
        return {evenly_distribute(s[0], ok, gk, mask, NanMaximum::NanGradient)};
      });
  return out;
}

Tensor max(const Tensor& a) {
  FSDP_DISPATCH("max", max, a);
  FSDP_CHECK(a.numel() > 0 || a.is_meta(), RuntimeError,
             "max(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
             "reduction dim with the 'dim' argument.");
  auto mask = reduction_mask({}, a.dim(), "max");
  Tensor out = amax_impl("max", a, mask, false);
  autograd::record("MaxBackward1", {a}, {out}, {a, out},
                   [mask](const variable_list& s, const variable_list& g) -> variable_list {
                     Shape keep(s[0].shape().size(), 1);
                     return {evenly_distribute(s[0], reshape(s[1], keep), reshape(g[0], keep), mask,
                                               NanMaximum::ToNanElements)};
                   });
  return out;
}

std::pair<Tensor, Tensor> max(const Tensor& a, std::int64_t dim, bool keepdim) {
  FSDP_DISPATCH("max.dim", max, a, dim, keepdim);
  const Device dev = common_device("max", {&a});
  auto d = static_cast<std::size_t>(wrap_dim(dim, a.dim(), "max"));
  std::vector<bool> mask(static_cast<std::size_t>(a.dim()), false);
  if (a.dim() > 0) mask[d] = true;
  FSDP_CHECK(a.dim() == 0 || a.shape()[d] > 0, IndexError,
             "max(): Expected reduction dim {} to have non-zero size (tensor shape {})", d,
             shape_str(a.shape()));
  Shape out_shape = reduced_shape(a.shape(), mask, keepdim);
  Tensor values = new_tensor(out_shape, a.dtype(), dev);
  Tensor indices = new_tensor(out_shape, DType::Int64, dev);
  if (!dev.is_meta() && a.numel() > 0)
    kernels(dev).max_dim(values, indices, a, static_cast<std::int64_t>(d));
  autograd::record(
      "MaxBackward0", {a}, {values}, {indices},
      [s = a.shape(), d, keepdim](const variable_list& sv,
                                  const variable_list& g) -> variable_list {
        // Scatter each gradient to the position of its maximum.
        Tensor gk = keepdim || s.empty() ? g[0] : unsqueeze(g[0], static_cast<std::int64_t>(d));
        Tensor ik = keepdim || s.empty() ? sv[0] : unsqueeze(sv[0], static_cast<std::int64_t>(d));
        Tensor grad = zeros(s, TensorOptions(g[0].dtype(), g[0].device()));
        if (grad.is_meta() || grad.numel() == 0) return {grad};
        kernels(grad.device()).max_dim_backward(grad, gk, ik, static_cast<std::int64_t>(d));
        return {grad};
      });
  return {values, indices};
}

Tensor argmax(const Tensor& a, std::int64_t dim, bool keepdim) {
  FSDP_DISPATCH("argmax", argmax, a, dim, keepdim);
  FSDP_CHECK(a.dtype() != DType::Bool, TypeError,
             "argmax(): does not support bool input (shape {})", shape_str(a.shape()));
  autograd::NoGradGuard ng;
  return max(a, dim, keepdim).second;
}

Tensor sum_to(const Tensor& a, const Shape& shape) {
  FSDP_DISPATCH("sum_to", sum_to, a, shape);
  if (a.shape() == shape) return a;
  const Shape& as = a.shape();
  FSDP_CHECK(shape.size() <= as.size(), RuntimeError,
             "sum_to: shape {} is not expandable to size {}", shape_str(shape), shape_str(as));
  const std::size_t lead = as.size() - shape.size();
  std::vector<bool> mask(as.size(), false);
  bool any = false;
  for (std::size_t i = 0; i < as.size(); ++i) {
    if (i < lead) {
      mask[i] = true;
    } else {
      std::int64_t want = shape[i - lead];
      FSDP_CHECK(want == as[i] || want == 1, RuntimeError,
                 "sum_to: shape {} is not expandable to size {}", shape_str(shape), shape_str(as));
      mask[i] = want == 1 && as[i] != 1;
    }
    any = any || mask[i];
  }
  Tensor r = any ? sum_impl("sum_to", a, mask, true, false) : a;
  return reshape(r, shape);
}

}  // namespace fsdp
