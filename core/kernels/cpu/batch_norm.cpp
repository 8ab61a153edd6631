// The CPU batch norm kernels (moved from core/functional/batch_norm.cpp): per-channel statistics
// of an (n, c, s) input in double, the running statistics' update in place, normalisation and
// backward.
#include "core/kernel_utils.h"
#include "core/kernels/cpu/cpu_kernels.h"
#include "core/kernels/cpu/row_kernels.h"

namespace fsdp::cpu {
namespace {

// Per-channel mean and biased variance (two passes, double accumulation).
template <typename T>
void channel_stats(const T* x, const NcsLayout& l, double* mean, double* var) {
  const double count = static_cast<double>(l.n * l.s);
  for (std::int64_t ch = 0; ch < l.c; ++ch) {
    double s = 0;
    for (std::int64_t i = 0; i < l.n; ++i) {
      const T* p = x + (i * l.c + ch) * l.s;
      for (std::int64_t j = 0; j < l.s; ++j) s += p[j];
    }
    const double mu = s / count;
    double ss = 0;
    for (std::int64_t i = 0; i < l.n; ++i) {
      const T* p = x + (i * l.c + ch) * l.s;
      for (std::int64_t j = 0; j < l.s; ++j) {
        const double d = static_cast<double>(p[j]) - mu;
        ss += d * d;
      }
    }
    mean[ch] = mu;
    var[ch] = ss / count;
  }
}

// y = (x - mean) * invstd * w + b, per channel (w, b optional).
template <typename T>
void normalize(const T* x, T* y, const T* mean, const T* invstd, const T* w, const T* b,
               const NcsLayout& l) {
  for (std::int64_t i = 0; i < l.n; ++i)
    for (std::int64_t ch = 0; ch < l.c; ++ch) {
      const T scale = invstd[ch] * (w ? w[ch] : T(1));
      const T mu = mean[ch], shift = b ? b[ch] : T(0);
      const std::int64_t base = (i * l.c + ch) * l.s;
      for (std::int64_t j = 0; j < l.s; ++j) y[base + j] = (x[base + j] - mu) * scale + shift;
    }
}

// Backward. Per channel: sum_g = sum(g), sum_gx = sum(g * xhat) with xhat = (x - mean) * invstd;
//   training: dx = w * invstd * (g - sum_g / count - xhat * sum_gx / count)
//   eval:     dx = w * invstd * g      (the statistics are constants)
//   dw = sum_gx, db = sum_g.
template <typename T>
void batch_norm_backward(const T* x, const T* g, const T* mean, const T* invstd, const T* w, T* dx,
                         double* dw, double* db, const NcsLayout& l, bool training) {
  const double count = static_cast<double>(l.n * l.s);
  for (std::int64_t ch = 0; ch < l.c; ++ch) {
    const T mu = mean[ch], is = invstd[ch];
    double sum_g = 0, sum_gx = 0;
    for (std::int64_t i = 0; i < l.n; ++i) {
      const std::int64_t base = (i * l.c + ch) * l.s;
      for (std::int64_t j = 0; j < l.s; ++j) {
        sum_g += g[base + j];
        sum_gx += static_cast<double>(g[base + j]) * ((x[base + j] - mu) * is);
      }
    }
    if (dw) dw[ch] = sum_gx;
    if (db) db[ch] = sum_g;
    if (!dx) continue;
    const T k = is * (w ? w[ch] : T(1));
    const T mean_g = training ? static_cast<T>(sum_g / count) : T(0);
    const T mean_gx = training ? static_cast<T>(sum_gx / count) : T(0);
    for (std::int64_t i = 0; i < l.n; ++i) {
      const std::int64_t base = (i * l.c + ch) * l.s;
      for (std::int64_t j = 0; j < l.s; ++j) {
        const T xhat = (x[base + j] - mu) * is;
        dx[base + j] = k * (g[base + j] - mean_g - xhat * mean_gx);
      }
    }
  }
}

}  // namespace

void batch_norm_stats(const Tensor& mean, const Tensor& var, const Tensor& x, const NcsLayout& l) {
  dispatch_float(x.dtype(), "batch_norm", [&]<typename T>() {
    channel_stats<T>(x.data<T>(), l, mean.data<double>(), var.data<double>());
  });
}

// running = (1 - momentum) * running + momentum * value, in place in running's own dtype.
void running_update(const Tensor& running, const Tensor& value, double momentum) {
  void* p = running.data_ptr();
  const std::int64_t stride = running.dim() == 1 ? running.stride(0) : 1;
  const DType d = running.dtype();
  const double* v = value.data<double>();
  for (std::int64_t ch = 0; ch < value.numel(); ++ch) {
    const std::int64_t o = ch * stride;
    store_double(p, d, o, (1.0 - momentum) * load_double(p, d, o) + momentum * v[ch]);
  }
}

void batch_norm(const Tensor& y, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                const Tensor& w, const Tensor& b, const NcsLayout& l) {
  dispatch_float(x.dtype(), "batch_norm", [&]<typename T>() {
    normalize<T>(x.data<T>(), y.data<T>(), mean.data<T>(), invstd.data<T>(),
                 functional::ptr_or_null<T>(w), functional::ptr_or_null<T>(b), l);
  });
}

void batch_norm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& x,
                         const Tensor& g, const Tensor& mean, const Tensor& invstd, const Tensor& w,
                         const NcsLayout& l, bool training) {
  dispatch_float(x.dtype(), "batch_norm", [&]<typename T>() {
    batch_norm_backward<T>(x.data<T>(), g.data<T>(), mean.data<T>(), invstd.data<T>(),
                           functional::ptr_or_null<T>(w), dx.data<T>(), dw.data<double>(),
                           db.data<double>(), l, training);
  });
}

}  // namespace fsdp::cpu
