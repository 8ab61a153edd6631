// batch_norm for inputs (N, C), (N, C, L), (N, C, H, W), (N, C, D, H, W): per-channel statistics
// over every dim but 1. The input is read as (N, C, S) with S the product of the spatial dims.
//
// Training: normalises with the batch mean and biased variance, and (when given) updates the
// running stats in place, exactly as torch's functional form:
//   running_mean = (1 - momentum) * running_mean + momentum * mean
//   running_var  = (1 - momentum) * running_var  + momentum * var * count / (count - 1)
// `momentum` is always a number here; the module turns torch's momentum=None (cumulative moving
// average) into momentum = 1 / num_batches_tracked before calling, as torch's _BatchNorm does.
// Eval: normalises with the running stats. Backward covers both modes.
#include "core/dispatch/intercept.h"
#include "core/functional/functional_common.h"
#include "core/kernels/kernel_table.h"
#include "core/ops.h"

namespace fsdp {
namespace {

void check_channel_tensor(const Tensor& t, std::int64_t c, const char* what, const Shape& input) {
  if (!t.defined()) return;
  FSDP_CHECK(t.numel() == c, RuntimeError,
             "batch_norm: {} should contain {} elements (one per channel of input of shape {}), "
             "not {} (shape {})",
             what, c, shape_str(input), t.numel(), shape_str(t.shape()));
  functional::check_floating(t, "batch_norm", what);
}

}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  FSDP_DISPATCH("batch_norm", batch_norm, input, running_mean, running_var, weight, bias, training,
                momentum, eps);
  const char* op = "batch_norm";
  functional::check_floating(input, op, "input");
  FSDP_CHECK(input.dim() >= 2, ValueError,
             "batch_norm: expected an input of 2 or more dimensions (N, C, ...), got shape {}",
             shape_str(input.shape()));
  const Shape in_shape = input.shape();
  NcsLayout l;
  l.n = in_shape[0];
  l.c = in_shape[1];
  for (std::size_t i = 2; i < in_shape.size(); ++i) l.s *= in_shape[i];
  check_channel_tensor(running_mean, l.c, "running_mean", in_shape);
  check_channel_tensor(running_var, l.c, "running_var", in_shape);
  check_channel_tensor(weight, l.c, "weight", in_shape);
  check_channel_tensor(bias, l.c, "bias", in_shape);
  FSDP_CHECK(training || (running_mean.defined() && running_var.defined()), RuntimeError,
             "batch_norm: running_mean and running_var must be defined in evaluation mode "
             "(training=false)");
  if (training)
    FSDP_CHECK(l.n * l.s > 1, ValueError,
               "batch_norm: expected more than 1 value per channel when training, got input "
               "size {}",
               shape_str(in_shape));
  const Device dev = common_device(op, {&input, &running_mean, &running_var, &weight, &bias});
  if (dev.is_meta()) return functional::meta_empty(in_shape, input.dtype());

  const DType out_dtype = input.dtype();
  const DType cd = functional::compute_dtype(out_dtype);
  Tensor x = functional::contiguous_as(input, cd);
  Tensor w = weight.defined() ? functional::contiguous_as(weight, cd) : Tensor();
  Tensor b = bias.defined() ? functional::contiguous_as(bias, cd) : Tensor();
  // The statistics in float64 on the device: the batch's, or the running ones.
  Tensor mean, var;
  if (training) {
    mean = new_tensor({l.c}, DType::Float64, dev);
    var = new_tensor({l.c}, DType::Float64, dev);
    kernels(dev).batch_norm_stats(mean, var, x, l);
    const std::int64_t count = l.n * l.s;
    if (running_mean.defined()) {
      running_mean.storage()->bump_version();
      kernels(dev).running_update(running_mean, mean, momentum);
    }
    if (running_var.defined()) {
      const double f = static_cast<double>(count) / static_cast<double>(count - 1);
      running_var.storage()->bump_version();
      kernels(dev).running_update(running_var, mul(var, f), momentum);
    }
  } else {
    mean = contiguous(to_dtype(running_mean.detach(), DType::Float64)).reshape({l.c});
    var = contiguous(to_dtype(running_var.detach(), DType::Float64)).reshape({l.c});
  }
  // Saved as fresh tensors, so later in-place updates of the running stats cannot touch them.
  Tensor mean_t = clone(to_dtype(mean, cd));
  Tensor invstd_t = to_dtype(rsqrt(add(var, eps)), cd);

  Tensor y = new_tensor(in_shape, cd, dev);
  kernels(dev).batch_norm(y, x, mean_t, invstd_t, w, b, l);
  Tensor out = functional::to_result_dtype(y, out_dtype);

  const bool has_w = weight.defined(), has_b = bias.defined();
  const DType w_dtype = has_w ? weight.dtype() : cd, b_dtype = has_b ? bias.dtype() : cd;
  const Shape w_shape = has_w ? weight.shape() : Shape{l.c};
  const Shape b_shape = has_b ? bias.shape() : Shape{l.c};
  autograd::record(
      "NativeBatchNormBackward", {input, weight, bias}, {out}, {input, weight, mean_t, invstd_t},
      [l, cd, out_dtype, training, has_w, has_b, w_dtype, b_dtype, in_shape, w_shape, b_shape](
          const autograd::variable_list& saved, const autograd::variable_list& grads) {
        autograd::variable_list result(3);
        if (!grads[0].defined()) return result;
        Tensor xs = functional::contiguous_as(saved[0], cd);
        Tensor ws = has_w ? functional::contiguous_as(saved[1], cd) : Tensor();
        Tensor g = functional::contiguous_as(grads[0], cd);
        const Device dev = xs.device();
        Tensor dx = new_tensor(in_shape, cd, dev);
        Tensor dw = new_tensor({l.c}, DType::Float64, dev);
        Tensor db = new_tensor({l.c}, DType::Float64, dev);
        kernels(dev).batch_norm_backward(dx, dw, db, xs, g, saved[2], saved[3], ws, l, training);
        result[0] = functional::to_result_dtype(dx, out_dtype);
        if (has_w) result[1] = to_dtype(dw, w_dtype).reshape(w_shape);
        if (has_b) result[2] = to_dtype(db, b_dtype).reshape(b_shape);
        return result;
      });
  return out;
}

}  // namespace fsdp
