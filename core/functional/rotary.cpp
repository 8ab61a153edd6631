// Rotary position embeddings as Hugging Face's Llama builds and applies them: the inverse
// frequencies (float32 powf, then a float32 divide: the bits transformers gets), the cos/sin
// tables of positions [p0, p0 + S) as cat(freqs, freqs), and apply_rotary's x cos +
// rotate_half(x) sin in one pass (the device's `rotary` kernel), whose backward is the same
// kernel transposed. The rope scaling variants (linear, llama3) rescale inv_freq in models/.
#include <cmath>
#include <vector>

#include "core/dispatch/intercept.h"
#include "core/functional/functional_common.h"
#include "core/kernels/kernel_table.h"
#include "core/ops.h"
#include "core/ops/op_utils.h"

namespace fsdp {

Tensor rotary_inv_freq(std::int64_t dim, double theta, Device device) {
  FSDP_CHECK(dim > 0 && dim % 2 == 0, ValueError,
             "rotary_inv_freq: the head dim must be positive and even, got {}", dim);
  FSDP_CHECK(theta > 0, ValueError, "rotary_inv_freq: theta must be positive, got {}", theta);
  // transformers: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in float32.
  std::vector<double> values(static_cast<std::size_t>(dim / 2));
  const auto base = static_cast<float>(theta);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    values[i] = 1.0f / ::powf(base, exponent);
  }
  return from_vector(values, {dim / 2}, TensorOptions(DType::Float32, device));
}

std::pair<Tensor, Tensor> rotary_cos_sin(const Tensor& inv_freq, std::int64_t p0, std::int64_t S,
                                         DType dtype) {
  // Any floating inv_freq (a model cast by to(dtype) casts its buffers too): read as float32,
  // as transformers' inv_freq.float() does.
  FSDP_CHECK(inv_freq.dim() == 1 && is_floating(inv_freq.dtype()), ValueError,
             "rotary_cos_sin: expected a 1-d floating inv_freq, got {} of shape {}",
             dtype_name(inv_freq.dtype()), shape_str(inv_freq.shape()));
  FSDP_CHECK(p0 >= 0 && S >= 0, ValueError,
             "rotary_cos_sin: positions [{}, {}) must be non-negative", p0, p0 + S);
  FSDP_CHECK(is_floating(dtype), TypeError,
             "rotary_cos_sin: expected a floating dtype for the tables, got {}", dtype_name(dtype));
  const Device dev = inv_freq.device();
  const std::int64_t half = inv_freq.size(0), D = 2 * half;
  if (dev.is_meta()) {
    return {functional::meta_empty({S, D}, dtype), functional::meta_empty({S, D}, dtype)};
  }
  // The tables are small (positions x head dim) and made once per step: on the host, then
  // copied to the device as the other host-valued factories are.
  const std::vector<double> inv = inv_freq.to_vector();
  std::vector<double> cos_v(static_cast<std::size_t>(S * D)), sin_v(cos_v.size());
  for (std::int64_t i = 0; i < S; ++i)
    for (std::int64_t j = 0; j < half; ++j) {
      // freqs = float(pos) * inv_freq in float32; emb = cat(freqs, freqs); cos/sin in float32.
      const float f = static_cast<float>(p0 + i) * static_cast<float>(inv[std::size_t(j)]);
      const auto at = static_cast<std::size_t>(i * D + j);
      cos_v[at] = cos_v[at + std::size_t(half)] = std::cos(f);
      sin_v[at] = sin_v[at + std::size_t(half)] = std::sin(f);
    }
  return {from_vector(cos_v, {S, D}, TensorOptions(dtype, dev)),
          from_vector(sin_v, {S, D}, TensorOptions(dtype, dev))};
}

Tensor apply_rotary(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  FSDP_DISPATCH("apply_rotary", apply_rotary, x, cos, sin);
  const char* op = "apply_rotary";
  functional::check_floating(x, op, "input");
  FSDP_CHECK(x.dim() == 4 && x.size(3) % 2 == 0, RuntimeError,
             "apply_rotary: expected x of shape (B, H, S, D) with D even, got {}",
             shape_str(x.shape()));
  const std::int64_t B = x.size(0), S = x.size(2), D = x.size(3);
  for (const Tensor* t : {&cos, &sin}) {
    const char* name = t == &cos ? "cos" : "sin";
    FSDP_CHECK(t->defined(), RuntimeError, "apply_rotary: {} is undefined", name);
    const bool fits = (t->dim() == 2 && t->size(0) == S && t->size(1) == D) ||
                      (t->dim() == 3 && t->size(0) == B && t->size(1) == S && t->size(2) == D);
    FSDP_CHECK(fits, RuntimeError,
               "apply_rotary: expected {} of shape [{}, {}] or [{}, {}, {}] for x of shape {}, "
               "got {}",
               name, S, D, B, S, D, shape_str(x.shape()), shape_str(t->shape()));
    FSDP_CHECK(t->dtype() == x.dtype(), TypeError,
               "apply_rotary: expected {} of x's dtype {}, got {} (cast the tables with "
               "rotary_cos_sin's dtype)",
               name, dtype_name(x.dtype()), dtype_name(t->dtype()));
  }
  FSDP_CHECK(cos.shape() == sin.shape(), RuntimeError,
             "apply_rotary: cos and sin differ in shape: {} and {}", shape_str(cos.shape()),
             shape_str(sin.shape()));
  const Device dev = common_device(op, {&x, &cos, &sin});
  if (dev.is_meta()) return functional::meta_empty(x.shape(), x.dtype());
  // x is read through its strides (a transposed projection needs no copy) if its rows are.
  Tensor xs = x.stride(3) == 1 || D <= 1 ? x.detach() : x.detach().contiguous();
  Tensor c = cos.detach().contiguous(), s = sin.detach().contiguous();
  const std::int64_t table_batch = c.dim() == 3 ? S * D : 0;
  Tensor out = new_tensor(x.shape(), x.dtype(), dev);
  kernels(dev).rotary(out, xs, c, s, table_batch, false);
  autograd::record(
      "RotaryBackward", {x}, {out}, {c, s},
      [table_batch](const autograd::variable_list& saved, const autograd::variable_list& grads) {
        if (!grads[0].defined()) return autograd::variable_list{Tensor()};
        const Tensor& g0 = grads[0];
        const Device dev = common_device("apply_rotary backward", {&g0, &saved[0]});
        Tensor g = g0.stride(3) == 1 ? g0 : g0.contiguous();
        Tensor dx = new_tensor(g.shape(), g.dtype(), dev);
        kernels(dev).rotary(dx, g, saved[0], saved[1], table_batch, true);
        return autograd::variable_list{dx};
      });
  return out;
}

}  // namespace fsdp
