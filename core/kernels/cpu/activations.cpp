// The CPU activation kernels (moved from core/functional/activations.cpp): one dtype dispatch
// per call, then a flat loop over contiguous data split across the intra-op threads; 16-bit
// floats are converted a chunk at a time and computed in float32 in the same pass.
#include <cmath>

#include "core/functional/functional_common.h"
#include "core/functional/vec_math.h"
#include "core/kernels/cpu/cpu_kernels.h"
#include "core/kernels/cpu/row_kernels.h"
#include "core/parallel.h"

namespace fsdp::cpu {

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

// Generic lambdas: instantiated for float and double by the dispatch above.
struct ReluFwd {
  template <typename T>
  [[gnu::always_inline]] T operator()(T x) const {
    return x > T(0) ? x : (x != x ? x : T(0));
  }
};
struct ReluBwd {  // saved: output; a NaN output passes g, as torch's threshold_backward
  template <typename T>
  [[gnu::always_inline]] T operator()(T y, T g) const {
    return y <= T(0) ? T(0) : g;
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

struct SiluFwd {
  template <typename T>
  [[gnu::always_inline]] T operator()(T x) const {
    return x / (T(1) + functional::fast_exp(-x));
  }
};
struct SiluBwd {  // saved: input; d/dx x sigmoid(x) = sigmoid(x) (1 + x (1 - sigmoid(x)))
  template <typename T>
  [[gnu::always_inline]] T operator()(T x, T g) const {
    const T s = T(1) / (T(1) + functional::fast_exp(-x));
    return g * (s * (T(1) + x * (T(1) - s)));
  }
};

template <typename Fwd>
void forward(const Tensor& y, const Tensor& x, Fwd fwd) {
  const DType d = x.dtype();
  const std::int64_t n = x.numel();
  if (functional::is_16bit_float(d)) {
    functional::map_16bit<1>(
        d, {x.data<std::uint16_t>()}, y.data<std::uint16_t>(), n,
        [&](const auto& in, float* out, std::int64_t len) { unary_loop(in[0], out, len, fwd); });
    return;
  }
  dispatch_float(d, "activation", [&]<typename T>() {
    const T* xs = x.data<T>();
    T* ys = y.data<T>();
    parallel_for(0, n, kParallelGrain,
                 [&](std::int64_t b, std::int64_t e) { unary_loop(xs + b, ys + b, e - b, fwd); });
  });
}

template <typename Bwd>
void backward(const Tensor& dx, const Tensor& s, const Tensor& g, Bwd bwd) {
  const DType d = s.dtype();
  const std::int64_t n = s.numel();
  if (functional::is_16bit_float(d)) {
    functional::map_16bit<2>(d, {s.data<std::uint16_t>(), g.data<std::uint16_t>()},
                             dx.data<std::uint16_t>(), n,
                             [&](const auto& in, float* out, std::int64_t len) {
                               binary_loop(in[0], in[1], out, len, bwd);
                             });
    return;
  }
  dispatch_float(d, "activation", [&]<typename T>() {
    const T* ss = s.data<T>();
    const T* gs = g.data<T>();
    T* ds = dx.data<T>();
    parallel_for(0, n, kParallelGrain, [&](std::int64_t b, std::int64_t e) {
      binary_loop(ss + b, gs + b, ds + b, e - b, bwd);
    });
  });
}

// torch.relu of an integer tensor: max(x, 0) in the same dtype.
void relu_integer(const Tensor& y, const Tensor& x) {
  const std::int64_t n = x.numel();
  auto clamp = [&]<typename I>() {
    unary_loop(x.data<I>(), y.data<I>(), n, [](I v) { return v > I(0) ? v : I(0); });
  };
  if (x.dtype() == DType::Int64)
    clamp.template operator()<std::int64_t>();
  else if (x.dtype() == DType::Int32)
    clamp.template operator()<std::int32_t>();
  else
    clamp.template operator()<std::uint8_t>();
}

}  // namespace

void activation(ActivationKind kind, const Tensor& y, const Tensor& x) {
  switch (kind) {
    case ActivationKind::Relu:
      if (!is_floating(x.dtype()))
        relu_integer(y, x);
      else
        forward(y, x, ReluFwd{});
      return;
    case ActivationKind::Tanh:
      forward(y, x, TanhFwd{});
      return;
    case ActivationKind::Sigmoid:
      forward(y, x, SigmoidFwd{});
      return;
    case ActivationKind::Gelu:
      forward(y, x, GeluFwd{});
      return;
    case ActivationKind::GeluTanh:
      forward(y, x, GeluTanhFwd{});
      return;
    case ActivationKind::Silu:
      forward(y, x, SiluFwd{});
      return;
  }
}

void activation_backward(ActivationKind kind, const Tensor& dx, const Tensor& saved,
                         const Tensor& g) {
  switch (kind) {
    case ActivationKind::Relu:
      backward(dx, saved, g, ReluBwd{});
      return;
    case ActivationKind::Tanh:
      backward(dx, saved, g, TanhBwd{});
      return;
    case ActivationKind::Sigmoid:
      backward(dx, saved, g, SigmoidBwd{});
      return;
    case ActivationKind::Gelu:
      backward(dx, saved, g, GeluBwd{});
      return;
    case ActivationKind::GeluTanh:
      backward(dx, saved, g, GeluTanhBwd{});
      return;
    case ActivationKind::Silu:
      backward(dx, saved, g, SiluBwd{});
      return;
  }
}

}  // namespace fsdp::cpu
