// Broadcasting binary arithmetic (add, sub, mul, div, maximum, minimum), scalar forms and
// unary math functions, each with its backward.
#include <cmath>
#include <cstring>

#include "core/dispatch/intercept.h"
#include "core/functional/vec_math.h"
#include "core/ops/elementwise_kernels.h"

namespace fsdp {
using namespace ops_detail;

namespace {

// Computes f over the broadcast of a and b, both converted to `dtype` (16-bit floats
// compute in float32 inside the kernel).
template <typename F>
Tensor binary_forward(const char* op, const Tensor& a, const Tensor& b, DType dtype, F f) {
  bool meta = check_devices(op, {&a, &b});
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = new_tensor(shape, dtype, meta);
  if (meta || out.numel() == 0) return out;
  Tensor ac = as_dtype(a, dtype), bc = as_dtype(b, dtype);
  dispatch_all(dtype, [&]<typename T>() { map2<T, T>(out, ac, bc, f); });
  return out;
}

template <typename F>
Tensor unary_forward(const char* op, const Tensor& a, DType dtype, F f) {
  bool meta = check_devices(op, a);
  Tensor out = new_tensor(a.shape(), dtype, meta);
  if (meta || out.numel() == 0) return out;
  Tensor ac = as_dtype(a, dtype);
  dispatch_all(dtype, [&]<typename T>() { map1<T, T>(out, ac, f); });
  return out;
}

// Float ops on integer inputs compute in the default float dtype.
DType float_result(DType t) {
  return is_floating(t) ? t : DType::Float32;
}

bool is_integral_value(double v) {
  return std::isfinite(v) && std::floor(v) == v;
}

// Tensor-scalar arithmetic keeps the tensor's dtype unless the scalar is fractional and the
// tensor is integral (then the default float dtype, as PyTorch's wrapped-number promotion).
DType scalar_result(DType t, double s) {
  if (is_floating(t)) return t;
  if (!is_integral_value(s)) return DType::Float32;
  return t == DType::Bool ? DType::Int64 : t;
}

template <typename C>
inline C nan_max(C x, C y) {
  if constexpr (std::is_floating_point_v<C>) {
    if (x != x) return x;
    if (y != y) return y;
  }
  return x > y ? x : y;
}
template <typename C>
inline C nan_min(C x, C y) {
  if constexpr (std::is_floating_point_v<C>) {
    if (x != x) return x;
    if (y != y) return y;
  }
  return x < y ? x : y;
}

// sign(x) as a tensor of x's dtype (0 at 0), for abs's backward.
Tensor sign(const Tensor& a) {
  return unary_forward("sign", a, a.dtype(), [](auto x) {
    using C = decltype(x);
    return static_cast<C>((C(0) < x) - (x < C(0)));
  });
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  FSDP_DISPATCH("add", add, a, b, alpha);
  DType dt = result_type(a, b);
  Tensor out;
  if (alpha == 1.0) {
    out = binary_forward("add", a, b, dt, [](auto x, auto y) { return x + y; });
  } else {
    out = binary_forward("add", a, b, dt, [alpha](auto x, auto y) {
      return x + static_cast<decltype(y)>(alpha) * y;
    });
  }
  bool ra = a.requires_grad(), rb = b.requires_grad();
  autograd::record("AddBackward0", {a, b}, {out}, {},
                   [sa = a.shape(), da = a.dtype(), sb = b.shape(), db = b.dtype(), alpha, ra, rb](
                       const variable_list&, const variable_list& g) -> variable_list {
                     Tensor ga = ra ? reduce_grad(g[0], sa, da) : Tensor();
                     Tensor gb;
                     if (rb) gb = reduce_grad(alpha == 1.0 ? g[0] : mul(g[0], alpha), sb, db);
                     return {ga, gb};
                   });
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b, double alpha) {
  FSDP_DISPATCH("sub", sub, a, b, alpha);
  FSDP_CHECK(a.dtype() != DType::Bool || b.dtype() != DType::Bool, TypeError,
             "sub: subtraction of two bool tensors is not supported; use logical_xor or "
             "logical_not instead");
  DType dt = result_type(a, b);
  Tensor out = binary_forward(
      "sub", a, b, dt, [alpha](auto x, auto y) { return x - static_cast<decltype(y)>(alpha) * y; });
  bool ra = a.requires_grad(), rb = b.requires_grad();
  autograd::record("SubBackward0", {a, b}, {out}, {},
                   [sa = a.shape(), da = a.dtype(), sb = b.shape(), db = b.dtype(), alpha, ra, rb](
                       const variable_list&, const variable_list& g) -> variable_list {
                     Tensor ga = ra ? reduce_grad(g[0], sa, da) : Tensor();
                     Tensor gb = rb ? reduce_grad(mul(g[0], -alpha), sb, db) : Tensor();
                     return {ga, gb};
                   });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("mul", mul, a, b);
  DType dt = result_type(a, b);
  Tensor out = binary_forward("mul", a, b, dt, [](auto x, auto y) { return x * y; });
  bool ra = a.requires_grad(), rb = b.requires_grad();
  autograd::record("MulBackward0", {a, b}, {out}, {rb ? a : Tensor(), ra ? b : Tensor()},
                   [sa = a.shape(), da = a.dtype(), sb = b.shape(), db = b.dtype(), ra, rb](
                       const variable_list& s, const variable_list& g) -> variable_list {
                     Tensor ga = ra ? reduce_grad(mul(g[0], s[1]), sa, da) : Tensor();
                     Tensor gb = rb ? reduce_grad(mul(g[0], s[0]), sb, db) : Tensor();
                     return {ga, gb};
                   });
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("div", div, a, b);
  DType dt = float_result(result_type(a, b));
  Tensor out = binary_forward("div", a, b, dt, [](auto x, auto y) { return x / y; });
  bool ra = a.requires_grad(), rb = b.requires_grad();
  autograd::record("DivBackward0", {a, b}, {out}, {rb ? a : Tensor(), b},
                   [sa = a.shape(), da = a.dtype(), sb = b.shape(), db = b.dtype(), ra, rb](
                       const variable_list& s, const variable_list& g) -> variable_list {
                     Tensor ga = ra ? reduce_grad(div(g[0], s[1]), sa, da) : Tensor();
                     Tensor gb;
                     if (rb) gb = reduce_grad(neg(div(mul(g[0], s[0]), mul(s[1], s[1]))), sb, db);
                     return {ga, gb};
                   });
  return out;
}

// Ties split the gradient evenly between both inputs (PyTorch's rule for maximum/minimum).
static Tensor extremum(const char* op, const Tensor& a, const Tensor& b, bool is_max) {
  DType dt = result_type(a, b);
  Tensor out = is_max ? binary_forward(op, a, b, dt, [](auto x, auto y) { return nan_max(x, y); })
                      : binary_forward(op, a, b, dt, [](auto x, auto y) { return nan_min(x, y); });
  bool ra = a.requires_grad(), rb = b.requires_grad();
  autograd::record(is_max ? "MaximumBackward0" : "MinimumBackward0", {a, b}, {out}, {a, b},
                   [sa = a.shape(), da = a.dtype(), sb = b.shape(), db = b.dtype(), ra, rb, is_max](
                       const variable_list& s, const variable_list& g) -> variable_list {
                     Tensor half = where(eq(s[0], s[1]), mul(g[0], 0.5), g[0]);
                     Tensor ga, gb;
                     if (ra) {
                       Tensor lose = is_max ? lt(s[0], s[1]) : gt(s[0], s[1]);
                       ga = reduce_grad(masked_fill(half, lose, 0.0), sa, da);
                     }
                     if (rb) {
                       Tensor lose = is_max ? gt(s[0], s[1]) : lt(s[0], s[1]);
                       gb = reduce_grad(masked_fill(half, lose, 0.0), sb, db);
                     }
                     return {ga, gb};
                   });
  return out;
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("maximum", maximum, a, b);
  return extremum("maximum", a, b, true);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("minimum", minimum, a, b);
  return extremum("minimum", a, b, false);
}

// --- tensor-scalar
Tensor add(const Tensor& a, double b) {
  FSDP_DISPATCH("add.Scalar", add, a, b);
  DType dt = scalar_result(a.dtype(), b);
  Tensor out = unary_forward("add", a, dt, [b](auto x) { return x + static_cast<decltype(x)>(b); });
  autograd::record(
      "AddBackward1", {a}, {out}, {},
      [](const variable_list&, const variable_list& g) -> variable_list { return {g[0]}; });
  return out;
}

Tensor mul(const Tensor& a, double b) {
  FSDP_DISPATCH("mul.Scalar", mul, a, b);
  DType dt = scalar_result(a.dtype(), b);
  Tensor out = unary_forward("mul", a, dt, [b](auto x) { return x * static_cast<decltype(x)>(b); });
  autograd::record("MulBackward1", {a}, {out}, {},
                   [b](const variable_list&, const variable_list& g) -> variable_list {
                     return {mul(g[0], b)};
                   });
  return out;
}

Tensor div(const Tensor& a, double b) {
  FSDP_DISPATCH("div.Scalar", div, a, b);
  DType dt = float_result(a.dtype());
  Tensor out;
  // Dividing by a constant multiplies by its reciprocal only where that is exact in binary.
  out = unary_forward("div", a, dt, [b](auto x) { return x / static_cast<decltype(x)>(b); });
  autograd::record("DivBackward1", {a}, {out}, {},
                   [b](const variable_list&, const variable_list& g) -> variable_list {
                     return {div(g[0], b)};
                   });
  return out;
}

Tensor pow(const Tensor& a, double e) {
  FSDP_DISPATCH("pow", pow, a, e);
  DType dt = scalar_result(a.dtype(), e);
  Tensor out;
  if (e == 2.0) {
    out = unary_forward("pow", a, dt, [](auto x) { return x * x; });
  } else if (e == 1.0) {
    out = unary_forward("pow", a, dt, [](auto x) { return x; });
  } else if (e == 0.5) {
    out = unary_forward("pow", a, dt, [](auto x) {
      using C = decltype(x);
      return static_cast<C>(std::sqrt(x));
    });
  } else {
    out = unary_forward("pow", a, dt, [e](auto x) {
      using C = decltype(x);
      if constexpr (std::is_integral_v<C>) {
        // Integer powers by repeated multiplication (negative exponents as PyTorch: 1/x^n
        // truncated is 0 except for |x| == 1).
        auto n = static_cast<std::int64_t>(e);
        if (n < 0) return static_cast<C>(x == 1 ? 1 : (x == C(-1) ? ((n & 1) ? -1 : 1) : 0));
        C r = 1;
        for (std::int64_t i = 0; i < n; ++i) r = static_cast<C>(r * x);
        return r;
      } else {
        return static_cast<C>(std::pow(x, static_cast<C>(e)));
      }
    });
  }
  autograd::record("PowBackward0", {a}, {out}, {a},
                   [e](const variable_list& s, const variable_list& g) -> variable_list {
                     if (e == 0.0) return {zeros_like(g[0])};
                     if (e == 1.0) return {g[0]};
                     if (e == 2.0) return {mul(g[0], mul(s[0], 2.0))};
                     return {mul(g[0], mul(pow(s[0], e - 1.0), e))};
                   });
  return out;
}

Tensor neg(const Tensor& a) {
  FSDP_DISPATCH("neg", neg, a);
  FSDP_CHECK(a.dtype() != DType::Bool, TypeError,
             "neg: negation, the `-` operator, on a bool tensor is not supported; use "
             "logical_not instead");
  Tensor out = unary_forward("neg", a, a.dtype(), [](auto x) { return -x; });
  autograd::record(
      "NegBackward0", {a}, {out}, {},
      [](const variable_list&, const variable_list& g) -> variable_list { return {neg(g[0])}; });
  return out;
}

// exp for float in [kExpLo, kExpHi]: the branch-free polynomial of functional/vec_math.h, so
// loops over it vectorize. Inputs outside the range (and NaN) are recomputed with std::exp
// afterwards, which keeps subnormal results that the fast form flushes to zero.
constexpr float kExpLo = -87.0f, kExpHi = 88.0f;

inline float exp_in_range(float x) {
  return functional::fast_exp(x);
}

Tensor exp(const Tensor& a) {
  FSDP_DISPATCH("exp", exp, a);
  const DType dt = float_result(a.dtype());
  Tensor out;
  if (dt == DType::Float64) {
    out = unary_forward("exp", a, dt, [](auto x) {
      using C = decltype(x);
      return static_cast<C>(std::exp(x));
    });
  } else {
    out = unary_forward("exp", a, dt, [](auto x) { return exp_in_range(static_cast<float>(x)); });
    if (!out.is_meta() && out.numel() > 0) {
      // Fix up the rare out-of-range inputs (overflow, underflow to subnormals/0, NaN).
      Tensor src = contiguous(as_dtype(a.detach(), dt));
      dispatch_all(dt, [&]<typename T>() {
        if constexpr (std::is_floating_point_v<compute_t<T>>) {
          const T* x = src.data<T>();
          T* o = out.data<T>();
          const std::int64_t n = out.numel();
          bool any = false;
          for (std::int64_t i = 0; i < n; ++i) {
            const float v = static_cast<float>(load(x[i]));
            any |= !(v >= kExpLo && v <= kExpHi);
          }
          if (!any) return;
          for (std::int64_t i = 0; i < n; ++i) {
            const float v = static_cast<float>(load(x[i]));
            if (!(v >= kExpLo && v <= kExpHi)) o[i] = store<T>(std::exp(v));
          }
        }
      });
    }
  }
  autograd::record("ExpBackward0", {a}, {out}, {out},
                   [](const variable_list& s, const variable_list& g) -> variable_list {
                     return {mul(g[0], s[0])};
                   });
  return out;
}

Tensor log(const Tensor& a) {
  FSDP_DISPATCH("log", log, a);
  Tensor out = unary_forward("log", a, float_result(a.dtype()), [](auto x) {
    using C = decltype(x);
    return static_cast<C>(std::log(x));
  });
  autograd::record("LogBackward0", {a}, {out}, {a},
                   [](const variable_list& s, const variable_list& g) -> variable_list {
                     return {div(g[0], s[0])};
                   });
  return out;
}

Tensor sqrt(const Tensor& a) {
  FSDP_DISPATCH("sqrt", sqrt, a);
  Tensor out = unary_forward("sqrt", a, float_result(a.dtype()), [](auto x) {
    using C = decltype(x);
    return static_cast<C>(std::sqrt(x));
  });
  autograd::record("SqrtBackward0", {a}, {out}, {out},
                   [](const variable_list& s, const variable_list& g) -> variable_list {
                     return {div(g[0], mul(s[0], 2.0))};
                   });
  return out;
}

Tensor rsqrt(const Tensor& a) {
  FSDP_DISPATCH("rsqrt", rsqrt, a);
  Tensor out = unary_forward("rsqrt", a, float_result(a.dtype()), [](auto x) {
    using C = decltype(x);
    return static_cast<C>(C(1) / std::sqrt(x));
  });
  autograd::record("RsqrtBackward0", {a}, {out}, {out},
                   [](const variable_list& s, const variable_list& g) -> variable_list {
                     return {mul(mul(g[0], pow(s[0], 3.0)), -0.5)};
                   });
  return out;
}

Tensor abs(const Tensor& a) {
  FSDP_DISPATCH("abs", abs, a);
  Tensor out = unary_forward("abs", a, a.dtype(), [](auto x) {
    using C = decltype(x);
    if constexpr (std::is_same_v<C, bool> || std::is_unsigned_v<C>)
      return x;
    else
      return static_cast<C>(x < C(0) ? -x : x);
  });
  autograd::record("AbsBackward0", {a}, {out}, {a},
                   [](const variable_list& s, const variable_list& g) -> variable_list {
                     return {mul(g[0], sign(s[0]))};
                   });
  return out;
}

}  // namespace fsdp
