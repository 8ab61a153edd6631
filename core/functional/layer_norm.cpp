// layer_norm over the trailing `normalized_shape` dims: each of the M rows of N elements is
// normalised with its own mean and biased variance, then scaled by weight and shifted by bias
// (both of shape normalized_shape, optional). Forward keeps per-row mean and 1/std for backward.
// The kernels are the device's (core/kernels, `layer_norm`).
#include "core/dispatch/intercept.h"
#include "core/functional/functional_common.h"
#include "core/kernels/kernel_table.h"
#include "core/ops.h"

namespace fsdp {
namespace {

// A parameter gradient accumulated in double (the kernel's sums), in the parameter's dtype.
Tensor param_grad(const Tensor& sums, const Shape& shape, DType d) {
  return to_dtype(sums, d).reshape(shape);
}

}  // namespace

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  FSDP_DISPATCH("layer_norm", layer_norm, input, normalized_shape, weight, bias, eps);
  const char* op = "layer_norm";
  functional::check_floating(input, op, "input");
  const auto nd = static_cast<std::int64_t>(normalized_shape.size());
  const Shape& in_shape = input.shape();
  bool ok = input.dim() >= nd;
  for (std::int64_t i = 0; ok && i < nd; ++i)
    ok = in_shape[static_cast<std::size_t>(input.dim() - nd + i)] ==
         normalized_shape[static_cast<std::size_t>(i)];
  FSDP_CHECK(ok, RuntimeError,
             "layer_norm: given normalized_shape={}, expected input with shape [*, {}], but got "
             "input of size {}",
             shape_str(normalized_shape),
             shape_str(normalized_shape).substr(1, shape_str(normalized_shape).size() - 2),
             shape_str(in_shape));
  for (const auto* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    FSDP_CHECK(p->shape() == normalized_shape, RuntimeError,
               "layer_norm: expected {} to be of same shape as normalized_shape, but got {} of "
               "shape {} and normalized_shape = {}",
               p == &weight ? "weight" : "bias", p == &weight ? "weight" : "bias",
               shape_str(p->shape()), shape_str(normalized_shape));
    functional::check_floating(*p, op, p == &weight ? "weight" : "bias");
  }
  const Device dev = common_device(op, {&input, &weight, &bias});
  if (dev.is_meta()) return functional::meta_empty(in_shape, input.dtype());

  const DType out_dtype = input.dtype();
  const DType cd = functional::compute_dtype(out_dtype);
  const std::int64_t n = shape_numel(normalized_shape);
  const std::int64_t m = n > 0 ? input.numel() / n : 0;
  Tensor w = weight.defined() ? functional::contiguous_as(weight, cd) : Tensor();
  Tensor b = bias.defined() ? functional::contiguous_as(bias, cd) : Tensor();
  Tensor mean = new_tensor({m}, cd, dev);
  Tensor rstd = new_tensor({m}, cd, dev);
  Tensor out;
  if (functional::is_16bit_float(out_dtype) && input.is_contiguous()) {
    out = new_tensor(in_shape, out_dtype, dev);
    kernels(dev).layer_norm(out, mean, rstd, input, w, b, n, eps);
  } else {
    Tensor x = functional::contiguous_as(input, cd);
    Tensor y = new_tensor(in_shape, cd, dev);
    kernels(dev).layer_norm(y, mean, rstd, x, w, b, n, eps);
    out = functional::to_result_dtype(y, out_dtype);
  }

  const bool has_w = weight.defined(), has_b = bias.defined();
  const DType w_dtype = has_w ? weight.dtype() : cd, b_dtype = has_b ? bias.dtype() : cd;
  autograd::record(
      "NativeLayerNormBackward", {input, weight, bias}, {out}, {input, weight, mean, rstd},
      [n, cd, out_dtype, has_w, has_b, w_dtype, b_dtype, in_shape, normalized_shape](
          const autograd::variable_list& saved, const autograd::variable_list& grads) {
        autograd::variable_list result(3);
        if (!grads[0].defined()) return result;
        Tensor ws = has_w ? functional::contiguous_as(saved[1], cd) : Tensor();
        const Tensor& g0 = grads[0];
        const Device dev = common_device("layer_norm backward", {&saved[0], &g0});
        Tensor dw = has_w ? zeros({n}, TensorOptions(DType::Float64, dev)) : Tensor();
        Tensor db = has_b ? zeros({n}, TensorOptions(DType::Float64, dev)) : Tensor();
        if (functional::is_16bit_float(out_dtype) && saved[0].dtype() == out_dtype &&
            saved[0].is_contiguous() && g0.dtype() == out_dtype && g0.is_contiguous()) {
          Tensor dx = new_tensor(in_shape, out_dtype, dev);
          kernels(dev).layer_norm_backward(dx, dw, db, saved[0], ws, saved[2], saved[3], g0, n);
          result[0] = dx;
        } else {
          Tensor xs = functional::contiguous_as(saved[0], cd);
          Tensor g = functional::contiguous_as(g0, cd);
          Tensor dx = new_tensor(in_shape, cd, dev);
          kernels(dev).layer_norm_backward(dx, dw, db, xs, ws, saved[2], saved[3], g, n);
          result[0] = functional::to_result_dtype(dx, out_dtype);
        }
        if (has_w) result[1] = param_grad(dw, normalized_shape, w_dtype);
        if (has_b) result[2] = param_grad(db, normalized_shape, b_dtype);
        return result;
      });
  return out;
}

}  // namespace fsdp
