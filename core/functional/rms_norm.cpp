// rms_norm: LlamaRMSNorm over the last dim. Each row is scaled by 1 / sqrt(mean(x^2) + eps)
// computed in float32 (x.float() in Llama; float64 computes natively), rounded back to x's dtype
// and then multiplied by the weight: the rounding before the weight is Llama's, and it is what
// makes bfloat16 results match. The kernels are the device's (core/kernels, `rms_norm`).
#include "core/dispatch/intercept.h"
#include "core/functional/functional_common.h"
#include "core/kernels/kernel_table.h"
#include "core/ops.h"
#include "core/ops/op_utils.h"

namespace fsdp {

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  FSDP_DISPATCH("rms_norm", rms_norm, x, weight, eps);
  const char* op = "rms_norm";
  functional::check_floating(x, op, "input");
  FSDP_CHECK(x.dim() >= 1, RuntimeError,
             "rms_norm: expected an input with a last dim, got a 0-d "
             "tensor");
  const std::int64_t n = x.size(-1);
  if (weight.defined()) {
    functional::check_floating(weight, op, "weight");
    FSDP_CHECK(weight.shape() == Shape{n}, RuntimeError,
               "rms_norm: expected weight of shape [{}] (the input's last dim), but got weight of "
               "shape {} and input of shape {}",
               n, shape_str(weight.shape()), shape_str(x.shape()));
  }
  const Device dev = common_device(op, {&x, &weight});
  const DType dt = x.dtype();
  if (weight.defined() && weight.dtype() != dt) {
    // Llama's `weight * y.to(input_dtype)` in torch's promoted dtype: the normalised rows, then
    // an ordinary product.
    return mul(weight, rms_norm(x, Tensor(), eps));
  }
  if (dev.is_meta()) return functional::meta_empty(x.shape(), dt);

  const DType cd = functional::compute_dtype(dt);
  const std::int64_t m = n > 0 ? x.numel() / n : 0;
  Tensor xc = functional::contiguous_as(x, dt);
  Tensor w = weight.defined() ? functional::contiguous_as(weight, dt) : Tensor();
  Tensor rstd = new_tensor({m}, cd, dev);
  Tensor out = new_tensor(x.shape(), dt, dev);
  kernels(dev).rms_norm(out, rstd, xc, w, n, eps);

  const bool has_w = weight.defined();
  const Shape shape = x.shape();
  autograd::record("RmsNormBackward", {x, weight}, {out}, {xc, w, rstd},
                   [n, dt, has_w, shape](const autograd::variable_list& saved,
                                         const autograd::variable_list& grads) {
                     autograd::variable_list result(2);
                     if (!grads[0].defined()) return result;
                     const Device dev = common_device("rms_norm backward", {&saved[0], &grads[0]});
                     Tensor g = functional::contiguous_as(grads[0], dt);
                     Tensor dx = new_tensor(shape, dt, dev);
                     Tensor dw = has_w ? zeros({n}, TensorOptions(DType::Float64, dev)) : Tensor();
                     kernels(dev).rms_norm_backward(dx, dw, saved[0], saved[1], saved[2], g, n);
                     result[0] = dx;
                     if (has_w) result[1] = to_dtype(dw, dt);
                     return result;
                   });
  return out;
}

}  // namespace fsdp
