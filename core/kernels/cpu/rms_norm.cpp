// The CPU RMSNorm kernels (LlamaRMSNorm): rows of n elements, each scaled by 1 / sqrt(mean(x^2)
// + eps), rounded to the input's dtype, then multiplied by the weight. Rows run across the
// intra-op threads; 16-bit rows are converted to float32 a row at a time (thread-local buffers),
// so the maths is float32 as Llama's x.float() makes it. The weight gradient is summed in double
// by columns, so its order does not depend on the thread count.
#include <cmath>
#include <vector>

#include "core/dtype_convert.h"
#include "core/functional/functional_common.h"
#include "core/functional/vec_math.h"
#include "core/kernels/cpu/cpu_kernels.h"
#include "core/kernels/cpu/row_kernels.h"
#include "core/ops/op_utils.h"
#include "core/parallel.h"

namespace fsdp::cpu {
using namespace ops_detail;

namespace {

// 1 / sqrt(mean(x^2) + eps): the mean rounded to C first, eps added in C (torch's var + eps).
template <typename C>
C row_rstd(const C* x, std::int64_t n, double eps) {
  const double ss = functional::row_sum<C>(n, [x](std::int64_t j) { return x[j] * x[j]; });
  const C var = static_cast<C>(n > 0 ? ss / static_cast<double>(n) : 0.0);
  return C(1) / std::sqrt(var + static_cast<C>(eps));
}

// dx = r gh - x r^3 mean(gh x), gh = g w, over one row in the compute type.
template <typename C>
void row_backward(const C* __restrict x, const C* __restrict g, const C* __restrict w, C r,
                  C* __restrict dx, std::int64_t n) {
  const double s = functional::row_sum<C>(
      n, [x, g, w](std::int64_t j) { return (w ? g[j] * w[j] : g[j]) * x[j]; });
  const C c = static_cast<C>(s / static_cast<double>(n)) * r * r * r;
  if (w)
    for (std::int64_t j = 0; j < n; ++j) dx[j] = r * (g[j] * w[j]) - x[j] * c;
  else
    for (std::int64_t j = 0; j < n; ++j) dx[j] = r * g[j] - x[j] * c;
}

// A 16-bit weight as float32 (n elements), or null.
std::vector<float> weight_as_float(const Tensor& w) {
  std::vector<float> out;
  if (!w.defined()) return out;
  out.resize(static_cast<std::size_t>(w.numel()));
  convert_contiguous(out.data(), DType::Float32, w.data<std::uint16_t>(), w.dtype(), w.numel());
  return out;
}

void forward16(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w,
               std::int64_t n, double eps) {
  const DType dt = x.dtype();
  const std::int64_t m = rstd.numel();
  const auto* xs = x.data<std::uint16_t>();
  auto* ys = y.data<std::uint16_t>();
  float* rs = rstd.data<float>();
  const std::vector<float> wf = weight_as_float(w);
  const float* wp = wf.empty() ? nullptr : wf.data();
  parallel_for(0, m, functional::row_grain(n), [&](std::int64_t r0, std::int64_t r1) {
    thread_local std::vector<float> buf;
    buf.resize(static_cast<std::size_t>(n));
    float* b = buf.data();
    for (std::int64_t r = r0; r < r1; ++r) {
      convert_contiguous(b, DType::Float32, xs + r * n, dt, n);
      const float rr = row_rstd<float>(b, n, eps);
      rs[r] = rr;
      for (std::int64_t j = 0; j < n; ++j) b[j] *= rr;
      convert_contiguous(ys + r * n, dt, b, DType::Float32, n);
      if (!wp) continue;
      // Llama rounds x * r to the input's dtype before the weight multiplies it.
      convert_contiguous(b, DType::Float32, ys + r * n, dt, n);
      for (std::int64_t j = 0; j < n; ++j) b[j] *= wp[j];
      convert_contiguous(ys + r * n, dt, b, DType::Float32, n);
    }
  });
}

void backward16(const Tensor& dx, const Tensor& x, const Tensor& w, const Tensor& rstd,
                const Tensor& g, std::int64_t n) {
  const DType dt = x.dtype();
  const std::int64_t m = rstd.numel();
  const auto* xs = x.data<std::uint16_t>();
  const auto* gs = g.data<std::uint16_t>();
  auto* ds = dx.data<std::uint16_t>();
  const float* rs = rstd.data<float>();
  const std::vector<float> wf = weight_as_float(w);
  const float* wp = wf.empty() ? nullptr : wf.data();
  parallel_for(0, m, functional::row_grain(n), [&](std::int64_t r0, std::int64_t r1) {
    thread_local std::vector<float> buf;
    buf.resize(static_cast<std::size_t>(3 * n));
    float *xb = buf.data(), *gb = xb + n, *db = gb + n;
    for (std::int64_t r = r0; r < r1; ++r) {
      convert_contiguous(xb, DType::Float32, xs + r * n, dt, n);
      convert_contiguous(gb, DType::Float32, gs + r * n, dt, n);
      row_backward<float>(xb, gb, wp, rs[r], db, n);
      convert_contiguous(ds + r * n, dt, db, DType::Float32, n);
    }
  });
}

// dw[j] = sum over rows of g * round(x * r), columns [j0, j1), rows in order.
template <typename T>
void weight_grad(const T* x, const T* g, const compute_t<T>* rstd, double* dw, std::int64_t m,
                 std::int64_t n, std::int64_t j0, std::int64_t j1) {
  using C = compute_t<T>;
  for (std::int64_t r = 0; r < m; ++r) {
    const T* xr = x + r * n;
    const T* gr = g + r * n;
    const C rr = rstd[r];
    for (std::int64_t j = j0; j < j1; ++j)
      dw[j] += static_cast<double>(load(gr[j]) * load(store<T>(load(xr[j]) * rr)));
  }
}

}  // namespace

void rms_norm(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w, std::int64_t n,
              double eps) {
  if (functional::is_16bit_float(x.dtype())) return forward16(y, rstd, x, w, n, eps);
  dispatch_float(x.dtype(), "rms_norm", [&]<typename T>() {
    const T* xs = x.data<T>();
    const T* wp = functional::ptr_or_null<T>(w);
    T* ys = y.data<T>();
    T* rs = rstd.data<T>();
    parallel_for(0, rstd.numel(), functional::row_grain(n), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        const T* xr = xs + r * n;
        T* yr = ys + r * n;
        const T rr = row_rstd<T>(xr, n, eps);
        rs[r] = rr;
        if (wp)
          for (std::int64_t j = 0; j < n; ++j) yr[j] = wp[j] * (xr[j] * rr);
        else
          for (std::int64_t j = 0; j < n; ++j) yr[j] = xr[j] * rr;
      }
    });
  });
}

void rms_norm_backward(const Tensor& dx, const Tensor& dw, const Tensor& x, const Tensor& w,
                       const Tensor& rstd, const Tensor& g, std::int64_t n) {
  const std::int64_t m = rstd.numel();
  if (functional::is_16bit_float(x.dtype())) {
    backward16(dx, x, w, rstd, g, n);
  } else {
    dispatch_float(x.dtype(), "rms_norm", [&]<typename T>() {
      const T *xs = x.data<T>(), *gs = g.data<T>(), *rs = rstd.data<T>();
      const T* wp = functional::ptr_or_null<T>(w);
      T* ds = dx.data<T>();
      parallel_for(0, m, functional::row_grain(n), [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r)
          row_backward<T>(xs + r * n, gs + r * n, wp, rs[r], ds + r * n, n);
      });
    });
  }
  if (!dw.defined()) return;
  functional::dispatch_floating(x.dtype(), "rms_norm", [&]<typename T>() {
    const T *xs = x.data<T>(), *gs = g.data<T>();
    const auto* rs = rstd.data<compute_t<T>>();
    double* dws = dw.data<double>();
    parallel_for(0, n, functional::row_grain(m), [&](std::int64_t j0, std::int64_t j1) {
      weight_grad<T>(xs, gs, rs, dws, m, n, j0, j1);
    });
  });
}

}  // namespace fsdp::cpu
