// The CPU classification loss kernels (moved from core/functional/classification_loss.cpp):
// cross_entropy (fused log-softmax + nll, with label smoothing) and nll_loss per position of an
// (n, c, s) input, their backward, and the in-order sum of the per-position losses.
#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype_convert.h"
#include "core/functional/functional_common.h"
#include "core/functional/vec_math.h"
#include "core/kernel_utils.h"
#include "core/kernels/cpu/cpu_kernels.h"

namespace fsdp::cpu {
namespace {

// Per position: lse = logsumexp over classes, and sum of the class scores (for smoothing).
template <typename T>
void class_stats(const T* x, const NcsLayout& l, double* lse, double* sum_x) {
  const std::int64_t c = l.c, s = l.s;
  std::vector<T> scratch(static_cast<std::size_t>(c));
  T* e = scratch.data();
  for (std::int64_t i = 0; i < l.n; ++i) {
    if (s == 1) {  // the common (N, C) case: a contiguous row per position, vectorised passes
      const T* p = x + i * c;
      T mx = functional::row_max(p, c);
      if (std::isinf(mx) && mx < 0) mx = 0;
      for (std::int64_t k = 0; k < c; ++k) e[k] = functional::fast_exp(p[k] - mx);
      lse[i] = std::log(functional::row_sum<T>(c, [e](std::int64_t k) { return e[k]; })) + mx;
      sum_x[i] = functional::row_sum<T>(c, [p](std::int64_t k) { return p[k]; });
      continue;
    }
    for (std::int64_t j = 0; j < s; ++j) {
      const T* p = x + i * c * s + j;
      double mx = -std::numeric_limits<double>::infinity();
      double sx = 0;
      for (std::int64_t k = 0; k < c; ++k) {
        mx = std::max<double>(mx, p[k * s]);
        sx += p[k * s];
      }
      if (std::isinf(mx) && mx < 0) mx = 0;
      const T m = static_cast<T>(mx);
      double acc = 0;
      for (std::int64_t k = 0; k < c; ++k) acc += functional::fast_exp(p[k * s] - m);
      lse[i * s + j] = std::log(acc) + mx;
      sum_x[i * s + j] = sx;
    }
  }
}

// The targets, every one checked against `bounds` before any loss is written.
const std::int64_t* checked_targets(const Tensor& targets, const IndexBounds& bounds) {
  const std::int64_t* t = targets.data<std::int64_t>();
  for (std::int64_t p = 0; p < targets.numel(); ++p) check_index(bounds, t[p], p);
  return t;
}

// The upstream gradient of position p's loss: one for every position, or one each.
double position_grad(const Tensor& grads, std::int64_t p) {
  return grads.data<double>()[grads.numel() == 1 ? 0 : p];
}

}  // namespace

void cross_entropy(const Tensor& losses, const Tensor& lse_t, const Tensor& x,
                   const Tensor& targets, const NcsLayout& l, const IndexBounds& bounds,
                   double eps) {
  if (functional::is_16bit_float(
          x.dtype()))  // computed on the values widened to float32, as a GPU does
    return cross_entropy(losses, lse_t, x.to(DType::Float32), targets, l, bounds, eps);
  const std::int64_t positions = l.n * l.s, ignore_index = bounds.ignore;
  const std::int64_t* tg = checked_targets(targets, bounds);
  std::vector<double> sum_x(static_cast<std::size_t>(positions));
  double* lse = lse_t.data<double>();
  double* out = losses.data<double>();
  const double cnum = static_cast<double>(l.c);
  dispatch_float(x.dtype(), "cross_entropy", [&]<typename T>() {
    const T* xp = x.data<T>();
    class_stats<T>(xp, l, lse, sum_x.data());
    for (std::int64_t p = 0; p < positions; ++p) {
      const std::int64_t t = tg[p];
      out[p] = 0.0;
      if (t == ignore_index) continue;
      const std::int64_t i = p / l.s, j = p % l.s;
      const double xt = xp[(i * l.c + t) * l.s + j];
      const double lp = lse[p];
      double loss = (1.0 - eps) * (lp - xt);
      if (eps > 0) loss += eps * (lp - sum_x[static_cast<std::size_t>(p)] / cnum);
      out[p] = loss;
    }
  });
}

void cross_entropy_backward(const Tensor& dx, const Tensor& xs, const Tensor& lse_t,
                            const Tensor& targets, const Tensor& grads, const NcsLayout& l,
                            const IndexBounds& bounds, double eps) {
  if (functional::is_16bit_float(
          xs.dtype())) {  // float32 on the widened values, rounded once into dx
    const Tensor dx32 = empty(xs.shape(), TensorOptions(DType::Float32, xs.device()));
    cross_entropy_backward(dx32, xs.to(DType::Float32), lse_t, targets, grads, l, bounds, eps);
    convert_contiguous(dx.data_ptr(), dx.dtype(), dx32.data_ptr(), DType::Float32, dx.numel());
    return;
  }
  const std::int64_t positions = l.n * l.s, ignore_index = bounds.ignore;
  const std::int64_t* t = checked_targets(targets, bounds);
  const double* lse = lse_t.data<double>();
  const double smooth = eps / static_cast<double>(l.c);
  dispatch_float(xs.dtype(), "cross_entropy", [&]<typename T>() {
    const T* xp = xs.data<T>();
    T* dp = dx.data<T>();
    for (std::int64_t p = 0; p < positions; ++p) {
      const std::int64_t tp = t[p];
      const std::int64_t i = p / l.s, j = p % l.s;
      T* dr = dp + i * l.c * l.s + j;
      if (tp == ignore_index) {  // every element is written: no zero-fill first
        for (std::int64_t k = 0; k < l.c; ++k) dr[k * l.s] = T(0);
        continue;
      }
      const T g = static_cast<T>(position_grad(grads, p));
      const T lp = static_cast<T>(lse[p]), sm = static_cast<T>(smooth);
      const T* xr = xp + i * l.c * l.s + j;
      if (l.s == 1) {
        for (std::int64_t k = 0; k < l.c; ++k) dr[k] = g * (functional::fast_exp(xr[k] - lp) - sm);
      } else {
        for (std::int64_t k = 0; k < l.c; ++k)
          dr[k * l.s] = g * (functional::fast_exp(xr[k * l.s] - lp) - sm);
      }
      dp[(i * l.c + tp) * l.s + j] -= g * static_cast<T>(1.0 - eps);
    }
  });
}

void nll_loss(const Tensor& losses, const Tensor& x, const Tensor& targets, const NcsLayout& l,
              const IndexBounds& bounds) {
  const std::int64_t positions = l.n * l.s, ignore_index = bounds.ignore;
  const std::int64_t* tg = checked_targets(targets, bounds);
  double* out = losses.data<double>();
  dispatch_float(x.dtype(), "nll_loss", [&]<typename T>() {
    const T* xp = x.data<T>();
    for (std::int64_t p = 0; p < positions; ++p) {
      const std::int64_t t = tg[p];
      out[p] = 0.0;
      if (t == ignore_index) continue;
      const std::int64_t i = p / l.s, j = p % l.s;
      out[p] = -static_cast<double>(xp[(i * l.c + t) * l.s + j]);
    }
  });
}

void nll_loss_backward(const Tensor& dx, const Tensor& targets, const Tensor& grads,
                       const NcsLayout& l, const IndexBounds& bounds) {
  const std::int64_t positions = l.n * l.s, ignore_index = bounds.ignore;
  const std::int64_t* t = checked_targets(targets, bounds);
  dispatch_float(dx.dtype(), "nll_loss", [&]<typename T>() {
    T* dp = dx.data<T>();
    for (std::int64_t p = 0; p < positions; ++p) {
      const std::int64_t tp = t[p];
      if (tp == ignore_index) continue;
      const std::int64_t i = p / l.s, j = p % l.s;
      dp[(i * l.c + tp) * l.s + j] = static_cast<T>(-position_grad(grads, p));
    }
  });
}

void sum_in_order(const Tensor& out, const Tensor& count, const Tensor& values,
                  const Tensor& targets, std::int64_t ignore_index) {
  const double* v = values.data<double>();
  double total = 0;
  for (std::int64_t i = 0; i < values.numel(); ++i) total += v[i];
  double divisor = 1.0;
  if (targets.defined()) {
    const std::int64_t* t = targets.data<std::int64_t>();
    divisor = 0.0;
    for (std::int64_t i = 0; i < targets.numel(); ++i) divisor += t[i] != ignore_index;
    if (count.defined()) count.data<double>()[0] = divisor;
  }
  store_double(out.data_ptr(), out.dtype(), 0, total / divisor);
}

}  // namespace fsdp::cpu
