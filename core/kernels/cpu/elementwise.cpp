// The CPU element-wise kernels: binary and unary arithmetic, comparisons, where and masked_fill.
// Moved from core/ops/elementwise.cpp and compare.cpp: the kind picks the lambda once per call,
// inside the dtype dispatch, so each loop is still inlined for its dtype and function.
#include <cmath>

#include "core/functional/vec_math.h"
#include "core/kernels/cpu/cpu_kernels.h"
#include "core/kernels/cpu/elementwise_kernels.h"

namespace fsdp::cpu {
using namespace ops_detail;

namespace {

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

// exp for float in [kExpLo, kExpHi]: the branch-free polynomial of functional/vec_math.h, so
// loops over it vectorize. Inputs outside the range (and NaN) are recomputed with std::exp
// afterwards, which keeps subnormal results that the fast form flushes to zero.
constexpr float kExpLo = -87.0f, kExpHi = 88.0f;

inline float exp_in_range(float x) {
  return functional::fast_exp(x);
}

// Fix up the rare out-of-range inputs of exp's fast form (overflow, underflow to subnormals/0,
// NaN).
template <typename T>
void exp_fixup(const Tensor& out, const Tensor& a) {
  if constexpr (std::is_floating_point_v<compute_t<T>>) {
    Tensor src = contiguous(a.detach());
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
}

}  // namespace

void binary(BinaryKind kind, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  dispatch_all(out.dtype(), [&]<typename T>() {
    switch (kind) {
      case BinaryKind::Add:
        if (alpha == 1.0)
          map2<T, T>(out, a, b, [](auto x, auto y) { return x + y; });
        else
          map2<T, T>(out, a, b,
                     [alpha](auto x, auto y) { return x + static_cast<decltype(y)>(alpha) * y; });
        return;
      case BinaryKind::Sub:
        map2<T, T>(out, a, b,
                   [alpha](auto x, auto y) { return x - static_cast<decltype(y)>(alpha) * y; });
        return;
      case BinaryKind::Mul:
        map2<T, T>(out, a, b, [](auto x, auto y) { return x * y; });
        return;
      case BinaryKind::Div:
        map2<T, T>(out, a, b, [](auto x, auto y) { return x / y; });
        return;
      case BinaryKind::Maximum:
        map2<T, T>(out, a, b, [](auto x, auto y) { return nan_max(x, y); });
        return;
      case BinaryKind::Minimum:
        map2<T, T>(out, a, b, [](auto x, auto y) { return nan_min(x, y); });
        return;
    }
  });
}

void unary(UnaryKind kind, const Tensor& out, const Tensor& a, double s) {
  dispatch_all(out.dtype(), [&]<typename T>() {
    switch (kind) {
      case UnaryKind::AddScalar:
        map1<T, T>(out, a, [s](auto x) { return x + static_cast<decltype(x)>(s); });
        return;
      case UnaryKind::MulScalar:
        map1<T, T>(out, a, [s](auto x) { return x * static_cast<decltype(x)>(s); });
        return;
      case UnaryKind::DivScalar:
        map1<T, T>(out, a, [s](auto x) { return x / static_cast<decltype(x)>(s); });
        return;
      case UnaryKind::Square:
        map1<T, T>(out, a, [](auto x) { return x * x; });
        return;
      case UnaryKind::Identity:
        map1<T, T>(out, a, [](auto x) { return x; });
        return;
      case UnaryKind::Sqrt:
        map1<T, T>(out, a, [](auto x) {
          using C = decltype(x);
          return static_cast<C>(std::sqrt(x));
        });
        return;
      case UnaryKind::Pow:
        map1<T, T>(out, a, [e = s](auto x) {
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
        return;
      case UnaryKind::Neg:
        map1<T, T>(out, a, [](auto x) { return -x; });
        return;
      case UnaryKind::Exp:
        if constexpr (std::is_same_v<T, double>) {
          map1<T, T>(out, a, [](auto x) {
            using C = decltype(x);
            return static_cast<C>(std::exp(x));
          });
        } else {
          map1<T, T>(out, a, [](auto x) { return exp_in_range(static_cast<float>(x)); });
          exp_fixup<T>(out, a);
        }
        return;
      case UnaryKind::Log:
        map1<T, T>(out, a, [](auto x) {
          using C = decltype(x);
          return static_cast<C>(std::log(x));
        });
        return;
      case UnaryKind::Rsqrt:
        map1<T, T>(out, a, [](auto x) {
          using C = decltype(x);
          return static_cast<C>(C(1) / std::sqrt(x));
        });
        return;
      case UnaryKind::Abs:
        map1<T, T>(out, a, [](auto x) {
          using C = decltype(x);
          if constexpr (std::is_same_v<C, bool> || std::is_unsigned_v<C>)
            return x;
          else
            return static_cast<C>(x < C(0) ? -x : x);
        });
        return;
      case UnaryKind::Sign:
        map1<T, T>(out, a, [](auto x) {
          using C = decltype(x);
          return static_cast<C>((C(0) < x) - (x < C(0)));
        });
        return;
    }
  });
}

void compare(CompareKind kind, const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_all(a.dtype(), [&]<typename T>() {
    switch (kind) {
      case CompareKind::Eq:
        map2<bool, T>(out, a, b, [](auto x, auto y) { return x == y; });
        return;
      case CompareKind::Ne:
        map2<bool, T>(out, a, b, [](auto x, auto y) { return x != y; });
        return;
      case CompareKind::Lt:
        map2<bool, T>(out, a, b, [](auto x, auto y) { return x < y; });
        return;
      case CompareKind::Le:
        map2<bool, T>(out, a, b, [](auto x, auto y) { return x <= y; });
        return;
      case CompareKind::Gt:
        map2<bool, T>(out, a, b, [](auto x, auto y) { return x > y; });
        return;
      case CompareKind::Ge:
        map2<bool, T>(out, a, b, [](auto x, auto y) { return x >= y; });
        return;
    }
  });
}

void eq_scalar(const Tensor& out, const Tensor& a, double b) {
  dispatch_all(a.dtype(), [&]<typename T>() {
    map1<bool, T>(out, a, [b](auto x) { return static_cast<double>(x) == b; });
  });
}

void logical_not(const Tensor& out, const Tensor& a) {
  dispatch_all(a.dtype(), [&]<typename T>() {
    map1<bool, T>(out, a, [](auto x) { return x == decltype(x)(0); });
  });
}

void where(const Tensor& out, const Tensor& cc, const Tensor& ac, const Tensor& bc) {
  const Shape& shape = out.shape();
  const Shape so = out.strides();
  const Shape sc = broadcast_strides(cc, shape);
  const Shape sa = broadcast_strides(ac, shape);
  const Shape sb = broadcast_strides(bc, shape);
  dispatch_all(out.dtype(), [&]<typename T>() {
    T* o = out.data<T>();
    const bool* pc = cc.data<bool>();
    const T* pa = ac.data<T>();
    const T* pb = bc.data<T>();
    for_each_run<4>(shape, {&so, &sc, &sa, &sb},
                    [&](const auto& off, std::int64_t n, const auto& in) {
                      T* op = o + off[0];
                      const bool* cp = pc + off[1];
                      const T* ap = pa + off[2];
                      const T* bp = pb + off[3];
                      if (in[0] == 1 && in[1] == 1 && in[2] == 1 && in[3] == 1) {
                        for (std::int64_t i = 0; i < n; ++i) op[i] = cp[i] ? ap[i] : bp[i];
                      } else {
                        for (std::int64_t i = 0; i < n; ++i)
                          op[i * in[0]] = cp[i * in[1]] ? ap[i * in[2]] : bp[i * in[3]];
                      }
                    });
  });
}

void masked_fill(const Tensor& out, const Tensor& a, const Tensor& mc, double value) {
  const Shape& shape = out.shape();
  const Shape so = out.strides();
  const Shape sa = broadcast_strides(a, shape);
  const Shape sm = broadcast_strides(mc, shape);
  dispatch_all(a.dtype(), [&]<typename T>() {
    const T v = from_double<T>(value);
    T* o = out.data<T>();
    const T* pa = a.data<T>();
    const bool* pm = mc.data<bool>();
    for_each_run<3>(shape, {&so, &sa, &sm}, [&](const auto& off, std::int64_t n, const auto& in) {
      T* op = o + off[0];
      const T* ap = pa + off[1];
      const bool* mp = pm + off[2];
      if (in[0] == 1 && in[1] == 1 && in[2] == 1) {
        for (std::int64_t i = 0; i < n; ++i) op[i] = mp[i] ? v : ap[i];
      } else if (in[0] == 1 && in[1] == 1 && in[2] == 0) {
        if (mp[0]) {
          for (std::int64_t i = 0; i < n; ++i) op[i] = v;
        } else {
          for (std::int64_t i = 0; i < n; ++i) op[i] = ap[i];
        }
      } else {
        for (std::int64_t i = 0; i < n; ++i) op[i * in[0]] = mp[i * in[2]] ? v : ap[i * in[1]];
      }
    });
  });
}

void masked_scale(const Tensor& y, const Tensor& x, const Tensor& mask, double scale) {
  const std::int64_t n = x.numel();
  const std::uint8_t* mk = mask.data<std::uint8_t>();
  dispatch_float(x.dtype(), "dropout", [&]<typename T>() {
    const T* sp = x.data<T>();
    T* yp = y.data<T>();
    const T sc = static_cast<T>(scale);
    for (std::int64_t i = 0; i < n; ++i) yp[i] = mk[i] ? sp[i] * sc : T(0);
  });
}

}  // namespace fsdp::cpu
