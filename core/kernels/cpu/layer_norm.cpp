// The CPU layer norm kernels (moved from core/functional/layer_norm.cpp): each of the m rows of
// n elements normalised with its own mean and biased variance (two passes), scaled and shifted;
// backward by rows for dx and by columns for the parameter gradients (summed in double, then
// written in the parameters' dtype), each across the intra-op threads. 16-bit rows are
// converted a block of rows at a time; their parameters may be float32 or 16-bit.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype_convert.h"
#include "core/functional/functional_common.h"
#include "core/functional/vec_math.h"
#include "core/kernels/cpu/cpu_kernels.h"
#include "core/kernels/cpu/row_kernels.h"
#include "core/parallel.h"

namespace fsdp::cpu {
namespace {

template <typename T>
void layer_norm_forward(const T* x, const T* w, const T* b, T* y, T* mean_out, T* rstd_out,
                        std::int64_t m, std::int64_t n, double eps) {
  for (std::int64_t r = 0; r < m; ++r) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    const double s = functional::row_sum<T>(n, [xr](std::int64_t j) { return xr[j]; });
    const double mean = n > 0 ? s / static_cast<double>(n) : 0.0;
    const T m0 = static_cast<T>(mean);
    // Two passes (mean, then squared deviations): no cancellation for rows far from zero.
    const double ss = functional::row_sum<T>(n, [xr, m0](std::int64_t j) {
      const T d = xr[j] - m0;
      return d * d;
    });
    const double var = n > 0 ? ss / static_cast<double>(n) : 0.0;
    const T rstd = static_cast<T>(1.0 / std::sqrt(var + eps));
    const T mu = static_cast<T>(mean);
    mean_out[r] = mu;
    rstd_out[r] = rstd;
    if (w && b) {
      for (std::int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - mu) * rstd * w[j] + b[j];
    } else if (w) {
      for (std::int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - mu) * rstd * w[j];
    } else if (b) {
      for (std::int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - mu) * rstd + b[j];
    } else {
      for (std::int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - mu) * rstd;
    }
  }
}

// With xhat = (x - mean) * rstd and gh = g * w:
//   dx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)),  dw = sum_rows g * xhat,  db = sum_rows
//   g.
template <typename T>
void layer_norm_backward(const T* x, const T* w, const T* mean, const T* rstd, const T* g, T* dx,
                         double* dw, double* db, std::int64_t m, std::int64_t n) {
  for (std::int64_t r = 0; r < m; ++r) {
    const T* xr = x + r * n;
    const T* gr = g + r * n;
    const T mu = mean[r], rs = rstd[r];
    const double sum_gh =
        functional::row_sum<T>(n, [gr, w](std::int64_t j) { return w ? gr[j] * w[j] : gr[j]; });
    const double sum_gh_xhat = functional::row_sum<T>(n, [gr, w, xr, mu, rs](std::int64_t j) {
      return (w ? gr[j] * w[j] : gr[j]) * ((xr[j] - mu) * rs);
    });
    if (dw)
      for (std::int64_t j = 0; j < n; ++j)
        dw[j] += static_cast<double>(gr[j] * ((xr[j] - mu) * rs));
    if (db)
      for (std::int64_t j = 0; j < n; ++j) db[j] += static_cast<double>(gr[j]);
    if (!dx) continue;
    const T a = static_cast<T>(sum_gh / static_cast<double>(n));
    const T c = static_cast<T>(sum_gh_xhat / static_cast<double>(n));
    T* dr = dx + r * n;
    for (std::int64_t j = 0; j < n; ++j) {
      const T xhat = (xr[j] - mu) * rs;
      const T gh = w ? gr[j] * w[j] : gr[j];
      dr[j] = rs * (gh - a - xhat * c);
    }
  }
}

// dw[j] += sum_rows g * xhat and db[j] += sum_rows g for columns [j0, j1), rows in order (the
// sums layer_norm_backward makes, column by column so column ranges can run on threads).
template <typename T>
void layer_norm_param_grads(const T* x, const T* mean, const T* rstd, const T* g, double* dw,
                            double* db, std::int64_t m, std::int64_t n, std::int64_t j0,
                            std::int64_t j1) {
  for (std::int64_t r = 0; r < m; ++r) {
    const T* xr = x + r * n;
    const T* gr = g + r * n;
    const T mu = mean[r], rs = rstd[r];
    if (dw)
      for (std::int64_t j = j0; j < j1; ++j)
        dw[j] += static_cast<double>(gr[j] * ((xr[j] - mu) * rs));
    if (db)
      for (std::int64_t j = j0; j < j1; ++j) db[j] += static_cast<double>(gr[j]);
  }
}

// A 16-bit row's parameter as float: a float32 one as it is, a 16-bit one converted once.
const float* float_params(const Tensor& p, std::vector<float>& converted) {
  if (!p.defined()) return nullptr;
  if (p.dtype() == DType::Float32) return p.data<float>();
  converted.resize(static_cast<std::size_t>(p.numel()));
  convert_contiguous(converted.data(), DType::Float32, p.data_ptr(), p.dtype(), p.numel());
  return converted.data();
}

// A parameter gradient's double sums written over `out` in its dtype (16-bit through float, as
// the CUDA kernels round them).
void write_sums(const Tensor& out, const std::vector<double>& sums) {
  if (!out.defined()) return;
  if (out.dtype() == DType::Float64) {
    std::copy(sums.begin(), sums.end(), out.data<double>());
    return;
  }
  std::vector<float> f(sums.begin(), sums.end());
  if (out.dtype() == DType::Float32)
    std::copy(f.begin(), f.end(), out.data<float>());
  else
    convert_contiguous(out.data_ptr(), out.dtype(), f.data(), DType::Float32, out.numel());
}

std::vector<double> sums_for(const Tensor& out, std::int64_t n) {
  return out.defined() ? std::vector<double>(static_cast<std::size_t>(n), 0.0)
                       : std::vector<double>();
}

double* data_or_null(std::vector<double>& v) {
  return v.empty() ? nullptr : v.data();
}

}  // namespace

void layer_norm(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                const Tensor& w, const Tensor& b, std::int64_t n, double eps) {
  const DType dt = x.dtype();
  const std::int64_t m = mean.numel();
  if (functional::is_16bit_float(dt)) {
    // 16-bit: blocks of rows converted to float32, normalised and rounded in one pass.
    const auto* xs = x.data<std::uint16_t>();
    auto* ys = y.data<std::uint16_t>();
    std::vector<float> wf, bf;
    const float *wp = float_params(w, wf), *bp = float_params(b, bf);
    functional::for_row_blocks(
        m, n, [&](std::int64_t r0, std::int64_t rows, float* xb, float* yb, float*) {
          convert_contiguous(xb, DType::Float32, xs + r0 * n, dt, rows * n);
          layer_norm_forward<float>(xb, wp, bp, yb, mean.data<float>() + r0,
                                    rstd.data<float>() + r0, rows, n, eps);
          convert_contiguous(ys + r0 * n, dt, yb, DType::Float32, rows * n);
        });
    return;
  }
  dispatch_float(dt, "layer_norm", [&]<typename T>() {
    const T* xs = x.data<T>();
    T* ys = y.data<T>();
    T* ms = mean.data<T>();
    T* rs = rstd.data<T>();
    parallel_for(0, m, functional::row_grain(n), [&](std::int64_t r0, std::int64_t r1) {
      layer_norm_forward<T>(xs + r0 * n, functional::ptr_or_null<T>(w),
                            functional::ptr_or_null<T>(b), ys + r0 * n, ms + r0, rs + r0, r1 - r0,
                            n, eps);
    });
  });
}

void layer_norm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& x,
                         const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& g,
                         std::int64_t n) {
  const DType dt = x.dtype();
  const std::int64_t m = mean.numel();
  std::vector<double> dw_sums = sums_for(dw, n), db_sums = sums_for(db, n);
  double* dwp = data_or_null(dw_sums);
  double* dbp = data_or_null(db_sums);
  if (functional::is_16bit_float(dt)) {
    const auto* xs = x.data<std::uint16_t>();
    const auto* gs = g.data<std::uint16_t>();
    auto* ds = dx.data<std::uint16_t>();
    std::vector<float> wf;
    const float* wp = float_params(w, wf);
    functional::for_row_blocks(
        m, n, [&](std::int64_t r0, std::int64_t rows, float* xb, float* db16, float* gb) {
          convert_contiguous(xb, DType::Float32, xs + r0 * n, dt, rows * n);
          convert_contiguous(gb, DType::Float32, gs + r0 * n, dt, rows * n);
          layer_norm_backward<float>(xb, wp, mean.data<float>() + r0, rstd.data<float>() + r0, gb,
                                     db16, dwp, dbp, rows, n);
          convert_contiguous(ds + r0 * n, dt, db16, DType::Float32, rows * n);
        });
    write_sums(dw, dw_sums);
    write_sums(db, db_sums);
    return;
  }
  dispatch_float(dt, "layer_norm", [&]<typename T>() {
    const T *xp = x.data<T>(), *mp = mean.data<T>(), *rp = rstd.data<T>();
    const T* gp = g.data<T>();
    T* dp = dx.data<T>();
    // dx by rows, then the parameter gradients by columns, each across the threads.
    parallel_for(0, m, functional::row_grain(n), [&](std::int64_t r0, std::int64_t r1) {
      layer_norm_backward<T>(xp + r0 * n, functional::ptr_or_null<T>(w), mp + r0, rp + r0,
                             gp + r0 * n, dp + r0 * n, nullptr, nullptr, r1 - r0, n);
    });
    if (dwp || dbp)
      parallel_for(0, n, functional::row_grain(m), [&](std::int64_t j0, std::int64_t j1) {
        layer_norm_param_grads<T>(xp, mp, rp, gp, dwp, dbp, m, n, j0, j1);
      });
  });
  write_sums(dw, dw_sums);
  write_sums(db, db_sums);
}

}  // namespace fsdp::cpu
