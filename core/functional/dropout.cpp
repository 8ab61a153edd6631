// dropout: zeroes each element with probability p and scales the survivors by 1 / (1 - p), as
// torch. The mask is drawn from `generator` (this thread's default when null), one uniform draw
// per element in row-major order, so restoring a generator's state replays the same mask
// (activation checkpointing relies on this). Eval mode or p == 0 is the identity; p == 1 gives
// zeros (and zero gradients).
#include "core/dispatch/intercept.h"
#include "core/functional/functional_common.h"
#include "core/kernels/kernel_table.h"
#include "core/ops.h"

namespace fsdp {

Tensor dropout(const Tensor& a, double p, bool training, Generator* generator) {
  FSDP_DISPATCH("dropout", dropout, a, p, training, generator);
  const char* op = "dropout";
  FSDP_CHECK(p >= 0.0 && p <= 1.0, ValueError,
             "dropout: dropout probability has to be between 0 and 1, but got {}", p);
  if (!training || p == 0.0) return a;
  functional::check_floating(a, op, "input");
  const Device dev = common_device(op, {&a});
  if (dev.is_meta()) return functional::meta_empty(a.shape(), a.dtype());

  const DType out_dtype = a.dtype();
  const DType cd = functional::compute_dtype(out_dtype);
  Tensor mask = new_tensor(a.shape(), DType::UInt8, dev);
  if (p == 1.0) {
    mask.fill_(0.0);
  } else {
    Generator& gen = generator ? *generator : default_generator();
    kernels(dev).random({RandomKind::Keep, p}, mask, gen);
  }
  const double scale = p == 1.0 ? 0.0 : 1.0 / (1.0 - p);

  // y = x * mask * scale; the same kernel serves backward with g in place of x.
  auto apply_mask = [scale](const Tensor& src, const Tensor& m, DType compute, DType result) {
    Tensor s = functional::contiguous_as(src, compute);
    Tensor y = new_tensor(s.shape(), compute, s.device());
    kernels(s.device()).masked_scale(y, s, m, scale);
    return functional::to_result_dtype(y, result);
  };
  Tensor out = apply_mask(a, mask, cd, out_dtype);
  autograd::record("NativeDropoutBackward", {a}, {out}, {mask},
                   [apply_mask, cd, out_dtype](const autograd::variable_list& saved,
                                               const autograd::variable_list& grads) {
                     if (!grads[0].defined()) return autograd::variable_list{Tensor()};
                     return autograd::variable_list{apply_mask(grads[0], saved[0], cd, out_dtype)};
                   });
  return out;
}

}  // namespace fsdp
