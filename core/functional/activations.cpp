// Pointwise activations: relu, gelu ("none" = exact erf form, "tanh" = the tanh approximation),
// tanh, sigmoid and silu; their kernels are the device's (core/kernels, `activation`).
#include <string>

#include "core/dispatch/intercept.h"
#include "core/functional/functional_common.h"
#include "core/kernels/kernel_table.h"
#include "core/ops.h"

namespace fsdp {
namespace {

// The shared shape of every activation: checks, meta, forward, record. `save_output` picks
// whether backward sees the output (relu, tanh, sigmoid) or the input (gelu, silu). 16-bit
// contiguous tensors go to the kernel as they are (it computes in float32 chunk by chunk);
// others in their compute dtype.
Tensor activation(const Tensor& a, const char* op, const char* node, bool save_output,
                  ActivationKind kind) {
  functional::check_floating(a, op, "input");
  const Device dev = common_device(op, {&a});
  if (dev.is_meta()) return functional::meta_empty(a.shape(), a.dtype());
  const DType out_dtype = a.dtype();
  Tensor out;
  if (functional::is_16bit_float(out_dtype) && a.is_contiguous()) {
    out = new_tensor(a.shape(), out_dtype, dev);
    kernels(dev).activation(kind, out, a);
  } else {
    Tensor x = functional::compute_input(a);
    Tensor y = new_tensor(x.shape(), x.dtype(), dev);
    kernels(dev).activation(kind, y, x);
    out = functional::to_result_dtype(y, out_dtype);
  }
  autograd::record(node, {a}, {out}, {save_output ? out : a},
                   [out_dtype, kind](const autograd::variable_list& saved,
                                     const autograd::variable_list& grads) {
                     if (!grads[0].defined()) return autograd::variable_list{Tensor()};
                     const Tensor& s = saved[0];
                     const Tensor& g = grads[0];
                     const Device dev = common_device("activation backward", {&s, &g});
                     if (functional::is_16bit_float(out_dtype) && s.dtype() == out_dtype &&
                         s.is_contiguous() && g.dtype() == out_dtype && g.is_contiguous()) {
                       Tensor dx = new_tensor(s.shape(), out_dtype, dev);
                       kernels(dev).activation_backward(kind, dx, s, g);
                       return autograd::variable_list{dx};
                     }
                     Tensor sc = functional::compute_input(s);
                     Tensor gc = functional::contiguous_as(g, sc.dtype());
                     Tensor dx = new_tensor(sc.shape(), sc.dtype(), dev);
                     kernels(dev).activation_backward(kind, dx, sc, gc);
                     return autograd::variable_list{functional::to_result_dtype(dx, out_dtype)};
                   });
  return out;
}

}  // namespace

Tensor relu(const Tensor& a) {
  FSDP_DISPATCH("relu", relu, a);
  const DType d = a.dtype();
  if (d == DType::Int64 || d == DType::Int32 || d == DType::UInt8) {
    // torch.relu also takes integer tensors (not differentiable): max(x, 0) in the same dtype.
    const Device dev = common_device("relu", {&a});
    if (dev.is_meta()) return functional::meta_empty(a.shape(), d);
    Tensor y = new_tensor(a.shape(), d, dev);
    kernels(dev).activation(ActivationKind::Relu, y, functional::contiguous_as(a, d));
    return y;
  }
  return activation(a, "relu", "ReluBackward", true, ActivationKind::Relu);
}

// Integer and bool inputs of tanh and sigmoid compute in the default float dtype (torch's
// unary float ops, as exp); gelu, silu and softmax refuse them, as torch does.
namespace {
Tensor float_input(const Tensor& a) {
  return is_floating(a.dtype()) ? a : to_dtype(a, DType::Float32);
}
}  // namespace

Tensor tanh(const Tensor& a) {
  FSDP_DISPATCH("tanh", tanh, a);
  return activation(float_input(a), "tanh", "TanhBackward", true, ActivationKind::Tanh);
}

Tensor sigmoid(const Tensor& a) {
  FSDP_DISPATCH("sigmoid", sigmoid, a);
  return activation(float_input(a), "sigmoid", "SigmoidBackward", true, ActivationKind::Sigmoid);
}

Tensor silu(const Tensor& a) {
  FSDP_DISPATCH("silu", silu, a);
  return activation(a, "silu", "SiluBackward", false, ActivationKind::Silu);
}

Tensor gelu(const Tensor& a, const std::string& approximate) {
  FSDP_DISPATCH("gelu", gelu, a, approximate);
  if (approximate == "none")
    return activation(a, "gelu", "GeluBackward", false, ActivationKind::Gelu);
  FSDP_CHECK(approximate == "tanh", RuntimeError,
             "gelu: approximate must be 'none' or 'tanh', got '{}'", approximate);
  return activation(a, "gelu", "GeluBackward", false, ActivationKind::GeluTanh);
}

}  // namespace fsdp
