// mse_loss: (input - target)^2, reduced by "mean" (over every element), "sum" or "none".
// Different shapes broadcast, with torch's warning (it is usually a bug in the caller).
#include <vector>

#include "core/dispatch/intercept.h"
#include "core/functional/functional_common.h"
#include "core/ops.h"
#include "core/warnings.h"

namespace fsdp {
namespace {

// `t` as a contiguous tensor of `shape` (broadcast if needed) in dtype `d`.
Tensor expanded(const Tensor& t, const Shape& shape, DType d) {
  if (t.shape() == shape) return functional::contiguous_as(t, d);
  Tensor out = empty(shape, TensorOptions(d));
  out.copy_(t.detach());
  return out;
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction) {
  FSDP_DISPATCH("mse_loss", mse_loss, input, target, reduction);
  const char* op = "mse_loss";
  FSDP_CHECK(reduction == "mean" || reduction == "sum" || reduction == "none", ValueError,
             "mse_loss: '{}' is not a valid value for reduction (expected 'mean', 'sum' or "
             "'none')",
             reduction);
  functional::check_floating(input, op, "input");
  functional::check_floating(target, op, "target");
  const Shape shape = broadcast_shapes(input.shape(), target.shape(), op);
  if (input.shape() != target.shape())
    warn(
        fmt::format("Using a target size ({}) that is different to the input size ({}). This "
                    "will likely lead to incorrect results due to broadcasting. Please ensure "
                    "they have the same size.",
                    shape_str(target.shape()), shape_str(input.shape())));
  const bool none = reduction == "none", mean = reduction == "mean";
  const DType out_dtype = input.dtype();
  if (functional::any_meta({&input, &target}, op))
    return functional::meta_empty(none ? shape : Shape{}, out_dtype);

  const DType cd = functional::compute_dtype(out_dtype);
  Tensor x = expanded(input, shape, cd);
  Tensor t = expanded(target, shape, cd);
  const std::int64_t n = x.numel();
  Tensor out;
  dispatch_float(cd, op, [&]<typename T>() {
    const T* xp = x.data<T>();
    const T* tp = t.data<T>();
    if (none) {
      Tensor y = empty(shape, TensorOptions(cd));
      T* yp = y.data<T>();
      for (std::int64_t i = 0; i < n; ++i) yp[i] = (xp[i] - tp[i]) * (xp[i] - tp[i]);
      out = functional::to_result_dtype(y, out_dtype);
    } else {
      double s = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const T d = xp[i] - tp[i];
        s += static_cast<double>(d) * d;
      }
      out = scalar_tensor(mean ? s / static_cast<double>(n) : s, TensorOptions(out_dtype));
    }
  });

  const Shape in_shape = input.shape(), tg_shape = target.shape();
  const DType tg_dtype = target.dtype();
  autograd::record("MseLossBackward", {input, target}, {out}, {input, target},
                   [shape, in_shape, tg_shape, cd, out_dtype, tg_dtype, none, mean, n](
                       const autograd::variable_list& saved, const autograd::variable_list& grads) {
                     autograd::variable_list result(2);
                     if (!grads[0].defined()) return result;
                     Tensor xs = expanded(saved[0], shape, cd);
                     Tensor ts = expanded(saved[1], shape, cd);
                     Tensor g = none ? functional::contiguous_as(grads[0], cd) : Tensor();
                     const double gs =
                         none ? 0.0 : grads[0].item() * (mean ? 2.0 / static_cast<double>(n) : 2.0);
                     Tensor d = empty(shape, TensorOptions(cd));
                     dispatch_float(cd, "mse_loss", [&]<typename T>() {
                       const T* xp = xs.data<T>();
                       const T* tp = ts.data<T>();
                       T* dp = d.data<T>();
                       if (none) {
                         const T* gp = g.data<T>();
                         for (std::int64_t i = 0; i < n; ++i)
                           dp[i] = T(2) * (xp[i] - tp[i]) * gp[i];
                       } else {
                         const T k = static_cast<T>(gs);
                         for (std::int64_t i = 0; i < n; ++i) dp[i] = k * (xp[i] - tp[i]);
                       }
                     });
                     // Broadcast inputs get their gradient summed back to their own shape.
                     Tensor dx = in_shape == shape ? d : sum_to(d, in_shape);
                     result[0] = functional::to_result_dtype(dx, out_dtype);
                     // d loss / d target = -(d loss / d input) before the reduction to each shape.
                     Tensor src =
                         functional::contiguous_as(tg_shape == shape ? d : sum_to(d, tg_shape), cd);
                     Tensor dt = empty(src.shape(), TensorOptions(cd));
                     dispatch_float(cd, "mse_loss", [&]<typename T>() {
                       const T* sp = src.data<T>();
                       T* p = dt.data<T>();
                       const std::int64_t m = dt.numel();
                       for (std::int64_t i = 0; i < m; ++i) p[i] = -sp[i];
                     });
                     result[1] = functional::to_result_dtype(dt, tg_dtype);
                     return result;
                   });
  return out;
}

}  // namespace fsdp
