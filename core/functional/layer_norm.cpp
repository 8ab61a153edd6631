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

// The dtype the kernels take the parameters in (core/kernels/kernel_table.h): the parameters'
// own when it is the compute dtype or the rows' 16-bit dtype (bf16 parameters of bf16 rows under
// mixed precision: no cast a call), else the compute dtype (so too for a weight and a bias of
// two dtypes: the kernels take one).
DType param_dtype(bool has_w, DType w, bool has_b, DType b, DType rows, DType cd) {
  if (has_w && has_b && w != b) return cd;
  const DType p = has_w ? w : has_b ? b : cd;
  return p == cd || p == rows ? p : cd;
}

Tensor param_as(const Tensor& p, DType d) {
  return p.defined() ? functional::contiguous_as(p, d) : Tensor();
}

// A parameter gradient the kernel wrote in `d`, in the parameter's shape and dtype.
Tensor param_grad(const Tensor& grad, const Shape& shape, DType d) {
  return functional::to_result_dtype(grad, d).reshape(shape);
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
  const bool has_w = weight.defined(), has_b = bias.defined();
  const DType w_dtype = has_w ? weight.dtype() : cd, b_dtype = has_b ? bias.dtype() : cd;
  Tensor mean = new_tensor({m}, cd, dev);
  Tensor rstd = new_tensor({m}, cd, dev);
  Tensor out;
  if (functional::is_16bit_float(out_dtype) && input.is_contiguous()) {
    const DType pd = param_dtype(has_w, w_dtype, has_b, b_dtype, out_dtype, cd);
    out = new_tensor(in_shape, out_dtype, dev);
    kernels(dev).layer_norm(out, mean, rstd, input, param_as(weight, pd), param_as(bias, pd), n,
                            eps);
  } else {
    const DType pd = param_dtype(has_w, w_dtype, has_b, b_dtype, cd, cd);
    Tensor w = param_as(weight, pd), b = param_as(bias, pd);
    Tensor x = functional::contiguous_as(input, cd);
    Tensor y = new_tensor(in_shape, cd, dev);
    kernels(dev).layer_norm(y, mean, rstd, x, w, b, n, eps);
    out = functional::to_result_dtype(y, out_dtype);
  }

  autograd::record(
      "NativeLayerNormBackward", {input, weight, bias}, {out}, {input, weight, mean, rstd},
      [n, cd, out_dtype, has_w, has_b, w_dtype, b_dtype, in_shape, normalized_shape](
          const autograd::variable_list& saved, const autograd::variable_list& grads) {
        autograd::variable_list result(3);
        if (!grads[0].defined()) return result;
        const Tensor& g0 = grads[0];
        const Device dev = common_device("layer_norm backward", {&saved[0], &g0});
        const bool rows16 = functional::is_16bit_float(out_dtype) &&
                            saved[0].dtype() == out_dtype && saved[0].is_contiguous() &&
                            g0.dtype() == out_dtype && g0.is_contiguous();
        // The kernel writes dw and db in the dtype it reads the weight in (the weight's own, as
        // the forward passed it): no zero-fill, no cast after.
        const DType pd = param_dtype(has_w, w_dtype, has_b, b_dtype, rows16 ? out_dtype : cd, cd);
        Tensor ws = has_w ? param_as(saved[1], pd) : Tensor();
        Tensor dw = has_w ? new_tensor({n}, pd, dev) : Tensor();
        Tensor db = has_b ? new_tensor({n}, pd, dev) : Tensor();
        if (rows16) {
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
