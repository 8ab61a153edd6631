// softmax and log_softmax along any dim, numerically stable (the row maximum is subtracted
// before exponentiating). The tensor is read as (outer, n, inner) around `dim`: with inner == 1
// each row is contiguous; otherwise a whole (n, inner) slab is processed with the inner index
// innermost, so every pass walks memory in order.
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "core/dispatch/intercept.h"
#include "core/dtype_convert.h"
#include "core/functional/functional_common.h"
#include "core/functional/masked_softmax.h"
#include "core/functional/vec_math.h"
#include "core/ops.h"

namespace fsdp {
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

// Softmax's backward over 16-bit rows (the last dim, contiguous), a block of rows at a time;
// nothing when the tensors are not such rows.
template <bool kLog>
std::optional<Tensor> backward_16bit(const Tensor& y, const Tensor& g, const RowLayout& layout) {
  const DType dt = y.dtype();
  if (!functional::is_16bit_float(dt) || layout.inner != 1 || !y.is_contiguous() ||
      g.dtype() != dt || !g.is_contiguous())
    return std::nullopt;
  Tensor dx = empty(y.shape(), TensorOptions(dt));
  const auto* ys = y.data<std::uint16_t>();
  const auto* gs = g.data<std::uint16_t>();
  auto* ds = dx.data<std::uint16_t>();
  const std::int64_t n = layout.n;
  functional::for_row_blocks(
      layout.outer, n, [&](std::int64_t r0, std::int64_t rows, float* yb, float* gb, float* db) {
        convert_contiguous(yb, DType::Float32, ys + r0 * n, dt, rows * n);
        convert_contiguous(gb, DType::Float32, gs + r0 * n, dt, rows * n);
        softmax_backward<float, kLog>(yb, gb, db, RowLayout{rows, n, 1});
        convert_contiguous(ds + r0 * n, dt, db, DType::Float32, rows * n);
      });
  return dx;
}

template <bool kLog>
Tensor softmax_impl(const Tensor& a, std::int64_t dim, const char* op) {
  functional::check_floating(a, op, "input");
  const std::int64_t d = functional::wrap_dim(dim, a.dim(), op);
  if (functional::any_meta({&a}, op)) return functional::meta_empty(a.shape(), a.dtype());
  const DType out_dtype = a.dtype();
  const DType cd = functional::compute_dtype(out_dtype);
  const RowLayout layout = functional::row_layout(a.shape(), d);
  Tensor out;
  if (functional::is_16bit_float(out_dtype) && layout.inner == 1 && a.is_contiguous()) {
    // 16-bit rows: blocks of rows converted, normalised and rounded in one pass.
    out = empty(a.shape(), TensorOptions(out_dtype));
    const auto* xs = a.data<std::uint16_t>();
    auto* ys = out.data<std::uint16_t>();
    const std::int64_t n = layout.n;
    functional::for_row_blocks(
        layout.outer, n, [&](std::int64_t r0, std::int64_t rows, float* xb, float* yb, float*) {
          convert_contiguous(xb, DType::Float32, xs + r0 * n, out_dtype, rows * n);
          softmax_forward<float, kLog>(xb, yb, RowLayout{rows, n, 1});
          convert_contiguous(ys + r0 * n, out_dtype, yb, DType::Float32, rows * n);
        });
  } else {
    Tensor x = functional::compute_input(a);
    Tensor y = empty(a.shape(), TensorOptions(cd));
    dispatch_float(cd, op, [&]<typename T>() {
      softmax_forward_par<T, kLog>(x.data<T>(), y.data<T>(), layout);
    });
    out = functional::to_result_dtype(y, out_dtype);
  }
  autograd::record(kLog ? "LogSoftmaxBackward" : "SoftmaxBackward", {a}, {out}, {out},
                   [layout, out_dtype, op](const autograd::variable_list& saved,
                                           const autograd::variable_list& grads) {
                     if (!grads[0].defined()) return autograd::variable_list{Tensor()};
                     if (auto dx = backward_16bit<kLog>(saved[0], grads[0], layout))
                       return autograd::variable_list{*dx};
                     Tensor yc = functional::compute_input(saved[0]);
                     const DType c = yc.dtype();
                     Tensor g = functional::contiguous_as(grads[0], c);
                     Tensor dx = empty(yc.shape(), TensorOptions(c));
                     dispatch_float(c, op, [&]<typename T>() {
                       softmax_backward_par<T, kLog>(yc.data<T>(), g.data<T>(), dx.data<T>(),
                                                     layout);
                     });
                     return autograd::variable_list{functional::to_result_dtype(dx, out_dtype)};
                   });
  return out;
}

// The backward node of softmax along the last (contiguous) dim, saving the output.
void record_softmax_backward(const Tensor& input, const Tensor& out, const RowLayout& layout,
                             DType out_dtype) {
  autograd::record("SoftmaxBackward", {input}, {out}, {out},
                   [layout, out_dtype](const autograd::variable_list& saved,
                                       const autograd::variable_list& grads) {
                     if (!grads[0].defined()) return autograd::variable_list{Tensor()};
                     if (auto dx = backward_16bit<false>(saved[0], grads[0], layout))
                       return autograd::variable_list{*dx};
                     Tensor yc = functional::compute_input(saved[0]);
                     const DType c = yc.dtype();
                     Tensor g = functional::contiguous_as(grads[0], c);
                     Tensor dx = empty(yc.shape(), TensorOptions(c));
                     dispatch_float(c, "softmax", [&]<typename T>() {
                       softmax_backward_par<T, false>(yc.data<T>(), g.data<T>(), dx.data<T>(),
                                                      layout);
                     });
                     return autograd::variable_list{functional::to_result_dtype(dx, out_dtype)};
                   });
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
  if (functional::any_meta({&scores, &mask}, op)) return functional::meta_empty(scores.shape(), dt);
  Tensor x = scores.contiguous(), m = mask.detach().contiguous();
  const std::int64_t mask_stride = m.dim() == 3 && m.size(0) == B && B > 1 ? L * S : 0;
  Tensor y = empty(scores.shape(), TensorOptions(dt));
  const RowLayout layout{B * L, S, 1};
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
    record_softmax_backward(scores, y, layout, dt);
    return y;
  }
  dispatch_float(dt, op, [&]<typename T>() {
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
  record_softmax_backward(scores, y, layout, dt);
  return y;
}

Tensor softmax(const Tensor& a, std::int64_t dim) {
  FSDP_DISPATCH("softmax", softmax, a, dim);
  return softmax_impl<false>(a, dim, "softmax");
}

Tensor log_softmax(const Tensor& a, std::int64_t dim) {
  FSDP_DISPATCH("log_softmax", log_softmax, a, dim);
  return softmax_impl<true>(a, dim, "log_softmax");
}

}  // namespace fsdp
