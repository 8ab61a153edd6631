// softmax and log_softmax along any dim, and masked_softmax (scores plus an additive mask,
// softmax over the last dim); their kernels are the device's (core/kernels, `softmax`).
#include "core/dispatch/intercept.h"
#include "core/functional/functional_common.h"
#include "core/functional/masked_softmax.h"
#include "core/kernels/kernel_table.h"
#include "core/ops.h"

namespace fsdp {
namespace {

using functional::RowLayout;

// dx of softmax (or log_softmax) from its output y and the gradient g. 16-bit rows along the
// last dim go to the kernel as they are; anything else in its compute dtype.
Tensor softmax_grad(const Tensor& y, const Tensor& g, const RowLayout& layout, DType out_dtype,
                    bool log) {
  const Device dev = common_device(log ? "log_softmax backward" : "softmax backward", {&y, &g});
  const DType dt = y.dtype();
  if (functional::is_16bit_float(dt) && layout.inner == 1 && y.is_contiguous() && g.dtype() == dt &&
      g.is_contiguous()) {
    Tensor dx = new_tensor(y.shape(), dt, dev);
    kernels(dev).softmax_backward(dx, y, g, layout.outer, layout.n, layout.inner, log);
    return dx;
  }
  Tensor yc = functional::compute_input(y);
  Tensor gc = functional::contiguous_as(g, yc.dtype());
  Tensor dx = new_tensor(yc.shape(), yc.dtype(), dev);
  kernels(dev).softmax_backward(dx, yc, gc, layout.outer, layout.n, layout.inner, log);
  return functional::to_result_dtype(dx, out_dtype);
}

// The backward node of softmax (or log_softmax), saving the output.
void record_softmax_backward(const Tensor& input, const Tensor& out, const RowLayout& layout,
                             DType out_dtype, bool log) {
  autograd::record(
      log ? "LogSoftmaxBackward" : "SoftmaxBackward", {input}, {out}, {out},
      [layout, out_dtype, log](const autograd::variable_list& saved,
                               const autograd::variable_list& grads) {
        if (!grads[0].defined()) return autograd::variable_list{Tensor()};
        return autograd::variable_list{softmax_grad(saved[0], grads[0], layout, out_dtype, log)};
      });
}

Tensor softmax_impl(const Tensor& a, std::int64_t dim, const char* op, bool log) {
  functional::check_floating(a, op, "input");
  const std::int64_t d = functional::wrap_dim(dim, a.dim(), op);
  const Device dev = common_device(op, {&a});
  if (dev.is_meta()) return functional::meta_empty(a.shape(), a.dtype());
  const DType out_dtype = a.dtype();
  const RowLayout layout = functional::row_layout(a.shape(), d);
  Tensor out;
  if (functional::is_16bit_float(out_dtype) && layout.inner == 1 && a.is_contiguous()) {
    out = new_tensor(a.shape(), out_dtype, dev);
    kernels(dev).softmax(out, a, layout.outer, layout.n, layout.inner, log);
  } else {
    Tensor x = functional::compute_input(a);
    Tensor y = new_tensor(a.shape(), x.dtype(), dev);
    kernels(dev).softmax(y, x, layout.outer, layout.n, layout.inner, log);
    out = functional::to_result_dtype(y, out_dtype);
  }
  record_softmax_backward(a, out, layout, out_dtype, log);
  return out;
}

}  // namespace

Tensor masked_softmax(const Tensor& scores, const Tensor& mask) {
  FSDP_DISPATCH("masked_softmax", masked_softmax, scores, mask);
  const char* op = "masked_softmax";
  const DType dt = scores.dtype();
  FSDP_CHECK(scores.dim() == 3 && is_floating(dt) && mask.defined() && mask.dtype() == dt,
             RuntimeError,
             "{}: expected floating-point scores (B, L, S) and a mask of their dtype, got "
             "scores {} of shape {} and mask {}",
             op, dtype_name(dt), shape_str(scores.shape()),
             mask.defined() ? shape_str(mask.shape()) : std::string("undefined"));
  const std::int64_t B = scores.size(0), L = scores.size(1), S = scores.size(2);
  const bool fits = (mask.dim() == 2 && mask.size(0) == L && mask.size(1) == S) ||
                    (mask.dim() == 3 && (mask.size(0) == 1 || mask.size(0) == B) &&
                     mask.size(1) == L && mask.size(2) == S);
  FSDP_CHECK(fits, RuntimeError,
             "{}: mask of shape {} does not fit scores of shape {}; expected (L, S), (1, L, S) "
             "or (B, L, S)",
             op, shape_str(mask.shape()), shape_str(scores.shape()));
  const Device dev = common_device(op, {&scores, &mask});
  if (dev.is_meta()) return functional::meta_empty(scores.shape(), dt);
  Tensor x = scores.contiguous(), m = mask.detach().contiguous();
  const std::int64_t mask_stride = m.dim() == 3 && m.size(0) == B && B > 1 ? L * S : 0;
  Tensor y = new_tensor(scores.shape(), dt, dev);
  kernels(dev).masked_softmax(y, x, m, mask_stride);
  record_softmax_backward(scores, y, RowLayout{B * L, S, 1}, dt, false);
  return y;
}

Tensor softmax(const Tensor& a, std::int64_t dim) {
  FSDP_DISPATCH("softmax", softmax, a, dim);
  return softmax_impl(a, dim, "softmax", false);
}

Tensor log_softmax(const Tensor& a, std::int64_t dim) {
  FSDP_DISPATCH("log_softmax", log_softmax, a, dim);
  return softmax_impl(a, dim, "log_softmax", true);
}

}  // namespace fsdp
