// The CPU softmax kernels (moved from core/functional/softmax.cpp): softmax and log_softmax
// along any dim, numerically stable (the row maximum is subtracted before exponentiating). The
// tensor is read as (outer, n, inner) around the dim: with inner == 1 each row is contiguous;
// otherwise a whole (n, inner) slab is processed with the inner index innermost, so every pass
// walks memory in order. 16-bit rows (inner == 1) are converted a block of rows at a time.
#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype_convert.h"
#include "core/functional/functional_common.h"
#include "core/functional/vec_math.h"
#include "core/kernels/cpu/cpu_kernels.h"
#include "core/kernels/cpu/row_kernels.h"
#include "core/parallel.h"

namespace fsdp::cpu {
namespace {

using functional::RowLayout;

template <typename T, bool kLog>
void softmax_forward(const T* x, T* y, const RowLayout& l) {
  const std::int64_t n = l.n, inner = l.inner;
  if (inner == 1) {
    for (std::int64_t o = 0; o < l.outer; ++o) {
      const T* xr = x + o * n;
      T* yr = y + o * n;
      T mx = functional::row_max(xr, n);
      if (std::isinf(mx) && mx < 0)
        mx = 0;  // a row of -inf: keep exp finite (gives nan like torch)
      // exp into y first (a vectorised pass), then sum it.
      for (std::int64_t k = 0; k < n; ++k) yr[k] = functional::fast_exp(xr[k] - mx);
      const double s = functional::row_sum<T>(n, [yr](std::int64_t k) { return yr[k]; });
      if constexpr (kLog) {
        const T lse = static_cast<T>(std::log(s)) + mx;
        for (std::int64_t k = 0; k < n; ++k) yr[k] = xr[k] - lse;
      } else {
        const T inv = static_cast<T>(1.0 / s);
        for (std::int64_t k = 0; k < n; ++k) yr[k] *= inv;
      }
    }
    return;
  }
  // Per-slab scratch: running max, partial sums in T (folded into double every kBlock rows,
  // so long softmax dims stay accurate) and the totals.
  std::vector<T> mx_buf(static_cast<std::size_t>(inner)), part_buf(mx_buf.size());
  std::vector<double> s_buf(mx_buf.size());
  T* __restrict mx = mx_buf.data();
  T* __restrict part = part_buf.data();
  double* __restrict s = s_buf.data();
  for (std::int64_t o = 0; o < l.outer; ++o) {
    const T* __restrict xs = x + o * n * inner;
    T* __restrict ys = y + o * n * inner;
    std::fill(mx, mx + inner, -std::numeric_limits<T>::infinity());
    std::fill(s, s + inner, 0.0);
    for (std::int64_t k = 0; k < n; ++k)
      for (std::int64_t i = 0; i < inner; ++i) mx[i] = std::max(mx[i], xs[k * inner + i]);
    for (std::int64_t i = 0; i < inner; ++i)
      if (std::isinf(mx[i]) && mx[i] < 0) mx[i] = 0;
    for (std::int64_t k = 0; k < n; ++k)
      for (std::int64_t i = 0; i < inner; ++i)
        ys[k * inner + i] = functional::fast_exp(xs[k * inner + i] - mx[i]);
    for (std::int64_t k0 = 0; k0 < n; k0 += functional::kBlock) {
      std::fill(part, part + inner, T(0));
      const std::int64_t k1 = std::min(n, k0 + functional::kBlock);
      for (std::int64_t k = k0; k < k1; ++k)
        for (std::int64_t i = 0; i < inner; ++i) part[i] += ys[k * inner + i];
      for (std::int64_t i = 0; i < inner; ++i) s[i] += part[i];
    }
    // mx becomes the log-sum-exp (log) or part the reciprocal of the sum (softmax).
    for (std::int64_t i = 0; i < inner; ++i) {
      if constexpr (kLog)
        mx[i] += static_cast<T>(std::log(s[i]));
      else
        part[i] = static_cast<T>(1.0 / s[i]);
    }
    for (std::int64_t k = 0; k < n; ++k)
      for (std::int64_t i = 0; i < inner; ++i) {
        if constexpr (kLog)
          ys[k * inner + i] = xs[k * inner + i] - mx[i];
        else
          ys[k * inner + i] *= part[i];
      }
  }
}

// softmax:     dx = y * (g - sum(g * y))
// log_softmax: dx = g - exp(y) * sum(g)
template <typename T, bool kLog>
void softmax_backward(const T* y, const T* g, T* dx, const RowLayout& l) {
  const std::int64_t n = l.n, inner = l.inner;
  if (inner == 1) {
    for (std::int64_t o = 0; o < l.outer; ++o) {
      const T* yr = y + o * n;
      const T* gr = g + o * n;
      T* dr = dx + o * n;
      if constexpr (kLog) {
        const T s =
            static_cast<T>(functional::row_sum<T>(n, [gr](std::int64_t k) { return gr[k]; }));
        for (std::int64_t k = 0; k < n; ++k) dr[k] = gr[k] - functional::fast_exp(yr[k]) * s;
      } else {
        const T s = static_cast<T>(
            functional::row_sum<T>(n, [gr, yr](std::int64_t k) { return gr[k] * yr[k]; }));
        for (std::int64_t k = 0; k < n; ++k) dr[k] = yr[k] * (gr[k] - s);
      }
    }
    return;
  }
  std::vector<double> s(static_cast<std::size_t>(inner));
  for (std::int64_t o = 0; o < l.outer; ++o) {
    const std::int64_t base = o * n * inner;
    const T* yr = y + base;
    const T* gr = g + base;
    T* dr = dx + base;
    std::fill(s.begin(), s.end(), 0.0);
    for (std::int64_t k = 0; k < n; ++k)
      for (std::int64_t i = 0; i < inner; ++i) {
        const std::int64_t j = k * inner + i;
        if constexpr (kLog)
          s[i] += gr[j];
        else
          s[i] += static_cast<double>(gr[j]) * yr[j];
      }
    for (std::int64_t k = 0; k < n; ++k)
      for (std::int64_t i = 0; i < inner; ++i) {
        const std::int64_t j = k * inner + i;
        if constexpr (kLog)
          dr[j] = gr[j] - functional::fast_exp(yr[j]) * static_cast<T>(s[i]);
        else
          dr[j] = yr[j] * (gr[j] - static_cast<T>(s[i]));
      }
  }
}

// The row kernels over the intra-op threads (core/parallel.h), for rows along the last dim.
template <typename T, bool kLog>
void softmax_forward_par(const T* x, T* y, const RowLayout& l) {
  if (l.inner != 1) return softmax_forward<T, kLog>(x, y, l);
  parallel_for(0, l.outer, functional::row_grain(l.n), [&](std::int64_t r0, std::int64_t r1) {
    softmax_forward<T, kLog>(x + r0 * l.n, y + r0 * l.n, RowLayout{r1 - r0, l.n, 1});
  });
}
template <typename T, bool kLog>
void softmax_backward_par(const T* y, const T* g, T* dx, const RowLayout& l) {
  if (l.inner != 1) return softmax_backward<T, kLog>(y, g, dx, l);
  parallel_for(0, l.outer, functional::row_grain(l.n), [&](std::int64_t r0, std::int64_t r1) {
    softmax_backward<T, kLog>(y + r0 * l.n, g + r0 * l.n, dx + r0 * l.n,
                              RowLayout{r1 - r0, l.n, 1});
  });
}

template <bool kLog>
void forward(const Tensor& y, const Tensor& x, const RowLayout& layout) {
  const DType dt = x.dtype();
  if (functional::is_16bit_float(dt)) {
    // 16-bit: blocks of outer slices (n x inner each) converted, normalised and rounded in one
    // pass.
    const auto* xs = x.data<std::uint16_t>();
    auto* ys = y.data<std::uint16_t>();
    const std::int64_t n = layout.n * layout.inner;
    functional::for_row_blocks(
        layout.outer, n, [&](std::int64_t r0, std::int64_t rows, float* xb, float* yb, float*) {
          convert_contiguous(xb, DType::Float32, xs + r0 * n, dt, rows * n);
          softmax_forward<float, kLog>(xb, yb, RowLayout{rows, layout.n, layout.inner});
          convert_contiguous(ys + r0 * n, dt, yb, DType::Float32, rows * n);
        });
    return;
  }
  dispatch_float(dt, kLog ? "log_softmax" : "softmax", [&]<typename T>() {
    softmax_forward_par<T, kLog>(x.data<T>(), y.data<T>(), layout);
  });
}

template <bool kLog>
void backward(const Tensor& dx, const Tensor& y, const Tensor& g, const RowLayout& layout) {
  const DType dt = y.dtype();
  if (functional::is_16bit_float(dt)) {
    const auto* ys = y.data<std::uint16_t>();
    const auto* gs = g.data<std::uint16_t>();
    auto* ds = dx.data<std::uint16_t>();
    const std::int64_t n = layout.n * layout.inner;
    functional::for_row_blocks(
        layout.outer, n, [&](std::int64_t r0, std::int64_t rows, float* yb, float* gb, float* db) {
          convert_contiguous(yb, DType::Float32, ys + r0 * n, dt, rows * n);
          convert_contiguous(gb, DType::Float32, gs + r0 * n, dt, rows * n);
          softmax_backward<float, kLog>(yb, gb, db, RowLayout{rows, layout.n, layout.inner});
          convert_contiguous(ds + r0 * n, dt, db, DType::Float32, rows * n);
        });
    return;
  }
  dispatch_float(dt, kLog ? "log_softmax" : "softmax", [&]<typename T>() {
    softmax_backward_par<T, kLog>(y.data<T>(), g.data<T>(), dx.data<T>(), layout);
  });
}

}  // namespace

void softmax(const Tensor& y, const Tensor& x, std::int64_t outer, std::int64_t n,
             std::int64_t inner, bool log) {
  const RowLayout layout{outer, n, inner};
  if (log)
    forward<true>(y, x, layout);
  else
    forward<false>(y, x, layout);
}

void softmax_backward(const Tensor& dx, const Tensor& y, const Tensor& g, std::int64_t outer,
                      std::int64_t n, std::int64_t inner, bool log) {
  const RowLayout layout{outer, n, inner};
  if (log)
    backward<true>(dx, y, g, layout);
  else
    backward<false>(dx, y, g, layout);
}

void masked_softmax(const Tensor& y, const Tensor& x, const Tensor& m, std::int64_t mask_stride) {
  const DType dt = x.dtype();
  const std::int64_t B = x.size(0), L = x.size(1), S = x.size(2);
  if (functional::is_16bit_float(dt)) {
    // 16-bit: the mask (once per distinct batch) and blocks of score rows in float32; the sum
    // is not rounded before the softmax, only its result.
    const auto* xs = x.data<std::uint16_t>();
    const auto* ms = m.data<std::uint16_t>();
    auto* ys = y.data<std::uint16_t>();
    std::vector<float> mf(static_cast<std::size_t>(L * S));
    for (std::int64_t b = 0; b < B; ++b) {
      if (b == 0 || mask_stride != 0)
        convert_contiguous(mf.data(), DType::Float32, ms + b * mask_stride, dt, L * S);
      const std::int64_t base = b * L * S;
      functional::for_row_blocks(
          L, S, [&](std::int64_t r0, std::int64_t rows, float* xb, float* yb, float*) {
            convert_contiguous(xb, DType::Float32, xs + base + r0 * S, dt, rows * S);
            const float* mr = mf.data() + r0 * S;
            for (std::int64_t i = 0; i < rows * S; ++i) xb[i] += mr[i];
            softmax_forward<float, false>(xb, yb, RowLayout{rows, S, 1});
            convert_contiguous(ys + base + r0 * S, dt, yb, DType::Float32, rows * S);
          });
    }
    return;
  }
  dispatch_float(dt, "masked_softmax", [&]<typename T>() {
    const T* xs = x.data<T>();
    const T* ms = m.data<T>();
    T* ys = y.data<T>();
    parallel_for(0, B, std::max<std::int64_t>(1, kParallelGrain / (L * S)),
                 [&](std::int64_t b0, std::int64_t b1) {
                   for (std::int64_t b = b0; b < b1; ++b) {
                     T* yb = ys + b * L * S;
                     for (std::int64_t i = 0; i < L * S; ++i)
                       yb[i] = ms[b * mask_stride + i] + xs[b * L * S + i];
                     softmax_forward<T, false>(yb, yb, RowLayout{L, S, 1});  // in place
                   }
                 });
  });
}

}  // namespace fsdp::cpu
