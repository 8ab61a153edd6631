// Pointwise activations: relu, gelu ("none" = exact erf form, "tanh" = the tanh approximation),
// tanh and sigmoid. One dtype dispatch per call, then a flat loop over contiguous data.
#include <cmath>
#include <string>

#include "core/dispatch/intercept.h"
#include "core/functional/functional_common.h"
#include "core/functional/vec_math.h"
#include "core/ops.h"
#include "core/parallel.h"

namespace fsdp {
namespace {

constexpr double kSqrt1_2 = 0.70710678118654752440;      // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluCoeff = 0.044715;

// The hot loops, with non-aliasing pointers so they vectorise without runtime checks.
template <typename T, typename F>
void unary_loop(const T* __restrict x, T* __restrict y, std::int64_t n, F f) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}
template <typename T, typename F>
void binary_loop(const T* __restrict a, const T* __restrict b, T* __restrict y, std::int64_t n,
                 F f) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
}

// y = fwd(x) elementwise, for a contiguous x in its compute dtype.
template <typename Fwd>
Tensor map_unary(const Tensor& x, const char* op, Fwd fwd) {
  const DType cd = x.dtype();
  Tensor y = empty(x.shape(), TensorOptions(cd));
  const std::int64_t n = x.numel();
  dispatch_float(cd, op, [&]<typename T>() {
    const T* xs = x.data<T>();
    T* ys = y.data<T>();
    parallel_for(0, n, kParallelGrain,
                 [&](std::int64_t b, std::int64_t e) { unary_loop(xs + b, ys + b, e - b, fwd); });
  });
  return y;
}

// dx = bwd(saved_value, g) elementwise; `saved` and `g` converted to the compute dtype.
template <typename Bwd>
Tensor map_backward(const Tensor& saved, const Tensor& grad, DType out_dtype, const char* op,
                    Bwd bwd) {
  Tensor s = functional::compute_input(saved);
  const DType cd = s.dtype();
  Tensor g = functional::contiguous_as(grad, cd);
  Tensor dx = empty(s.shape(), TensorOptions(cd));
  const std::int64_t n = s.numel();
  dispatch_float(cd, op, [&]<typename T>() {
    const T* ss = s.data<T>();
    const T* gs = g.data<T>();
    T* ds = dx.data<T>();
    parallel_for(0, n, kParallelGrain, [&](std::int64_t b, std::int64_t e) {
      binary_loop(ss + b, gs + b, ds + b, e - b, bwd);
    });
  });
  return functional::to_result_dtype(dx, out_dtype);
}

// The shared shape of every activation: checks, meta, forward, record. `save_output` picks
// whether backward sees the output (relu, tanh, sigmoid) or the input (gelu).
template <typename Fwd, typename Bwd>
Tensor activation(const Tensor& a, const char* op, const char* node, bool save_output, Fwd fwd,
                  Bwd bwd) {
  functional::check_floating(a, op, "input");
  if (functional::any_meta({&a}, op)) return functional::meta_empty(a.shape(), a.dtype());
  const DType out_dtype = a.dtype();
  Tensor out;
  if (functional::is_16bit_float(out_dtype) && a.is_contiguous()) {
    // 16-bit: converted a chunk at a time, in the same pass.
    out = empty(a.shape(), TensorOptions(out_dtype));
    functional::map_16bit<1>(
        out_dtype, {a.data<std::uint16_t>()}, out.data<std::uint16_t>(), a.numel(),
        [&](const auto& in, float* y, std::int64_t n) { unary_loop(in[0], y, n, fwd); });
  } else {
    out = functional::to_result_dtype(map_unary(functional::compute_input(a), op, fwd), out_dtype);
  }
  autograd::record(
      node, {a}, {out}, {save_output ? out : a},
      [out_dtype, op, bwd](const autograd::variable_list& saved,
                           const autograd::variable_list& grads) {
        if (!grads[0].defined()) return autograd::variable_list{Tensor()};
        const Tensor& s = saved[0];
        if (functional::is_16bit_float(out_dtype) && s.dtype() == out_dtype && s.is_contiguous() &&
            grads[0].dtype() == out_dtype && grads[0].is_contiguous()) {
          Tensor dx = empty(s.shape(), TensorOptions(out_dtype));
          functional::map_16bit<2>(
              out_dtype, {s.data<std::uint16_t>(), grads[0].data<std::uint16_t>()},
              dx.data<std::uint16_t>(), s.numel(), [&](const auto& in, float* y, std::int64_t n) {
                binary_loop(in[0], in[1], y, n, bwd);
              });
          return autograd::variable_list{dx};
        }
        return autograd::variable_list{map_backward(s, grads[0], out_dtype, op, bwd)};
      });
  return out;
}

// Generic lambdas: instantiated for float and double by the dispatch above.
struct ReluFwd {
  template <typename T>
  [[gnu::always_inline]] T operator()(T x) const {
    return x > T(0) ? x : (x != x ? x : T(0));
  }
};
struct ReluBwd {  // saved: output
  template <typename T>
  [[gnu::always_inline]] T operator()(T y, T g) const {
    return y > T(0) ? g : T(0);
  }
};
struct TanhFwd {
  template <typename T>
  [[gnu::always_inline]] T operator()(T x) const {
    return functional::fast_tanh(x);
  }
};
struct TanhBwd {  // saved: output
  template <typename T>
  [[gnu::always_inline]] T operator()(T y, T g) const {
    return g * (T(1) - y * y);
  }
};
struct SigmoidFwd {
  template <typename T>
  [[gnu::always_inline]] T operator()(T x) const {
    return T(1) / (T(1) + functional::fast_exp(-x));
  }
};
struct SigmoidBwd {  // saved: output
  template <typename T>
  [[gnu::always_inline]] T operator()(T y, T g) const {
    return g * y * (T(1) - y);
  }
};
struct GeluFwd {
  template <typename T>
  [[gnu::always_inline]] T operator()(T x) const {
    return x * T(0.5) * (T(1) + functional::fast_erf(x * T(kSqrt1_2)));
  }
};
struct GeluBwd {  // saved: input
  template <typename T>
  [[gnu::always_inline]] T operator()(T x, T g) const {
    const T cdf = T(0.5) * (T(1) + functional::fast_erf(x * T(kSqrt1_2)));
    const T pdf = T(kInvSqrt2Pi) * functional::fast_exp(T(-0.5) * x * x);
    return g * (cdf + x * pdf);
  }
};
struct GeluTanhFwd {
  template <typename T>
  [[gnu::always_inline]] T operator()(T x) const {
    const T inner = T(kSqrt2OverPi) * (x + T(kGeluCoeff) * x * x * x);
    return T(0.5) * x * (T(1) + functional::fast_tanh(inner));
  }
};
struct GeluTanhBwd {  // saved: input
  template <typename T>
  [[gnu::always_inline]] T operator()(T x, T g) const {
    const T inner = T(kSqrt2OverPi) * (x + T(kGeluCoeff) * x * x * x);
    const T t = functional::fast_tanh(inner);
    const T dinner = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCoeff) * x * x);
    return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * dinner);
  }
};

}  // namespace

Tensor relu(const Tensor& a) {
  FSDP_DISPATCH("relu", relu, a);
  const DType d = a.dtype();
  if (d == DType::Int64 || d == DType::Int32 || d == DType::UInt8) {
    // torch.relu also takes integer tensors (not differentiable): max(x, 0) in the same dtype.
    if (functional::any_meta({&a}, "relu")) return functional::meta_empty(a.shape(), d);
    Tensor x = functional::contiguous_as(a, d);
    Tensor y = empty(a.shape(), TensorOptions(d));
    const std::int64_t n = x.numel();
    auto clamp = [&]<typename I>() {
      unary_loop(x.data<I>(), y.data<I>(), n, [](I v) { return v > I(0) ? v : I(0); });
    };
    if (d == DType::Int64)
      clamp.template operator()<std::int64_t>();
    else if (d == DType::Int32)
      clamp.template operator()<std::int32_t>();
    else
      clamp.template operator()<std::uint8_t>();
    return y;
  }
  return activation(a, "relu", "ReluBackward", true, ReluFwd{}, ReluBwd{});
}

Tensor tanh(const Tensor& a) {
  FSDP_DISPATCH("tanh", tanh, a);
  return activation(a, "tanh", "TanhBackward", true, TanhFwd{}, TanhBwd{});
}

Tensor sigmoid(const Tensor& a) {
  FSDP_DISPATCH("sigmoid", sigmoid, a);
  return activation(a, "sigmoid", "SigmoidBackward", true, SigmoidFwd{}, SigmoidBwd{});
}

Tensor gelu(const Tensor& a, const std::string& approximate) {
  FSDP_DISPATCH("gelu", gelu, a, approximate);
  if (approximate == "none")
    return activation(a, "gelu", "GeluBackward", false, GeluFwd{}, GeluBwd{});
  FSDP_CHECK(approximate == "tanh", RuntimeError,
             "gelu: approximate must be 'none' or 'tanh', got '{}'", approximate);
  return activation(a, "gelu", "GeluBackward", false, GeluTanhFwd{}, GeluTanhBwd{});
}

}  // namespace fsdp
