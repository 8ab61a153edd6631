// The CPU kernels of norms: torch.nn.utils' gradient clipping (moved from core/nn/clip_grad.cpp:
// one tensor's share of a p-norm accumulated in double, clamp_ in place) and Embedding's max_norm
// renorm of the rows it reads (moved from core/nn/embedding.cpp).
#include <cmath>
#include <limits>

#include "core/kernel_utils.h"
#include "core/kernels/cpu/cpu_kernels.h"

namespace fsdp::cpu {
namespace {

// Calls f(value) for every element of t, read as double.
template <typename F>
void for_each_value(const Tensor& t, F&& f) {
  dispatch_all(t.dtype(), [&]<typename T>() {
    const T* base = t.data<T>();
    for_each_offset(t.shape(), t.strides(), [&](std::int64_t o) { f(to_double(base[o])); });
  });
}

// One tensor's share of the total: sum |x|^p for a finite non-zero p, max |x| for inf, min |x|
// for -inf, and for 0 whether it has a non-zero (torch takes the order-0 norm of the per-tensor
// norms: it counts tensors, not elements). Accumulated in double.
double partial_norm(const Tensor& t, double p) {
  double acc = std::isinf(p) ? (p > 0 ? 0.0 : std::numeric_limits<double>::infinity()) : 0.0;
  if (p == 2.0)
    for_each_value(t, [&](double v) { acc += v * v; });
  else if (p == 1.0)
    for_each_value(t, [&](double v) { acc += std::abs(v); });
  else if (std::isinf(p) && p > 0)
    for_each_value(t, [&](double v) { acc = std::fmax(acc, std::abs(v)); });
  else if (std::isinf(p))
    for_each_value(t, [&](double v) { acc = std::fmin(acc, std::abs(v)); });
  else if (p == 0.0)
    for_each_value(t, [&](double v) { acc = v != 0.0 ? 1.0 : acc; });
  else
    for_each_value(t, [&](double v) { acc += std::pow(std::abs(v), p); });
  // max/min must propagate nan as torch does (fmax/fmin drop it).
  if (std::isinf(p))
    for_each_value(t, [&](double v) {
      if (std::isnan(v)) acc = v;
    });
  return acc;
}

}  // namespace

void norm_partial(const Tensor& out, const Tensor& t, double p) {
  *out.data<double>() = partial_norm(t, p);
}

void clamp_(const Tensor& g, double lo, double hi) {
  dispatch_all(g.dtype(), [&]<typename T>() {
    T* base = g.data<T>();
    for_each_offset(g.shape(), g.strides(), [&](std::int64_t o) {
      const double v = to_double(base[o]);
      // torch.clamp_: nan stays nan.
      if (v < lo)
        base[o] = from_double<T>(lo);
      else if (v > hi)
        base[o] = from_double<T>(hi);
    });
  });
}

void embedding_renorm_(const Tensor& weight, const std::vector<std::int64_t>& rows, double max_norm,
                       double norm_type) {
  const std::int64_t dim = weight.size(1);
  dispatch_float(weight.dtype(), "embedding_renorm_", [&]<typename T>() {
    T* w = weight.data<T>();
    for (auto r : rows) {
      T* row = w + r * dim;
      double norm = 0.0;
      for (std::int64_t j = 0; j < dim; ++j)
        norm += std::pow(std::abs(static_cast<double>(row[j])), norm_type);
      norm = std::pow(norm, 1.0 / norm_type);
      if (norm > max_norm) {
        double scale = max_norm / (norm + 1e-7);
        for (std::int64_t j = 0; j < dim; ++j) row[j] = static_cast<T>(row[j] * scale);
      }
    }
  });
}

}  // namespace fsdp::cpu
