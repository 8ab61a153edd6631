// mse_loss: (input - target)^2, reduced by "mean" (over every element), "sum" or "none".
// Different shapes broadcast, with torch's warning (it is usually a bug in the caller).
#include "core/dispatch/intercept.h"
#include "core/functional/functional_common.h"
#include "core/kernels/kernel_table.h"
#include "core/ops.h"
#include "core/warnings.h"

namespace fsdp {
namespace {

// `t` as a contiguous tensor of `shape` (broadcast if needed) in dtype `d`.
Tensor expanded(const Tensor& t, const Shape& shape, DType d) {
  if (t.shape() == shape) return functional::contiguous_as(t, d);
  Tensor out = new_tensor(shape, d, t.device());
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
  const Device dev = common_device(op, {&input, &target});
  if (dev.is_meta()) return functional::meta_empty(none ? shape : Shape{}, out_dtype);

  const DType cd = functional::compute_dtype(out_dtype);
  Tensor x = expanded(input, shape, cd);
  Tensor t = expanded(target, shape, cd);
  const std::int64_t n = x.numel();
  Tensor out;
  if (none) {
    Tensor y = new_tensor(shape, cd, dev);
    kernels(dev).mse_loss(y, x, t, true, mean);
    out = functional::to_result_dtype(y, out_dtype);
  } else {
    out = new_tensor({}, out_dtype, dev);
    kernels(dev).mse_loss(out, x, t, false, mean);
  }

  const Shape in_shape = input.shape(), tg_shape = target.shape();
  const DType tg_dtype = target.dtype();
  autograd::record("MseLossBackward", {input, target}, {out}, {input, target},
                   [shape, in_shape, tg_shape, cd, out_dtype, tg_dtype, none, mean, n](
                       const autograd::variable_list& saved, const autograd::variable_list& grads) {
                     autograd::variable_list result(2);
                     if (!grads[0].defined()) return result;
                     Tensor xs = expanded(saved[0], shape, cd);
                     Tensor ts = expanded(saved[1], shape, cd);
                     // The upstream gradient stays on the device (no host read in a step).
                     Tensor g = functional::contiguous_as(grads[0], cd);
                     const double scale = mean ? 2.0 / static_cast<double>(n) : 2.0;
                     const Device dev = xs.device();
                     Tensor d = new_tensor(shape, cd, dev);
                     kernels(dev).mse_loss_backward(d, xs, ts, g, scale);
                     // Broadcast inputs get their gradient summed back to their own shape.
                     Tensor dx = in_shape == shape ? d : sum_to(d, in_shape);
                     result[0] = functional::to_result_dtype(dx, out_dtype);
                     // d loss / d target = -(d loss / d input) before the reduction to each shape.
                     Tensor src =
                         functional::contiguous_as(tg_shape == shape ? d : sum_to(d, tg_shape), cd);
                     Tensor dt = new_tensor(src.shape(), cd, dev);
                     kernels(dev).unary(UnaryKind::Neg, dt, src, 0.0);
                     result[1] = functional::to_result_dtype(dt, tg_dtype);
                     return result;
                   });
  return out;
}

}  // namespace fsdp
