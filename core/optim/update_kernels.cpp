#include "core/optim/update_kernels.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/parallel.h"

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace fsdp::optim {
namespace {

// The step's constants in the parameter's dtype.
template <typename T>
struct AdamConsts {
  T b1, b2, one_b1, one_b2, wd, eps, decay, neg_step_size, bc2_sqrt;
  explicit AdamConsts(const AdamScalars& s) {
    const double bc1 = 1.0 - std::pow(s.beta1, static_cast<double>(s.step));
    const double bc2 = 1.0 - std::pow(s.beta2, static_cast<double>(s.step));
    b1 = static_cast<T>(s.beta1);
    b2 = static_cast<T>(s.beta2);
    one_b1 = static_cast<T>(1.0 - s.beta1);
    one_b2 = static_cast<T>(1.0 - s.beta2);
    wd = static_cast<T>(s.weight_decay);
    eps = static_cast<T>(s.eps);
    decay = static_cast<T>(1.0 - s.lr * s.weight_decay);
    neg_step_size = static_cast<T>(-(s.lr / bc1));
    bc2_sqrt = static_cast<T>(std::sqrt(bc2));
  }
};

// Elements [begin, n) one at a time; the flags are template arguments so the loop has no
// branches.
template <typename T, bool kDecayParam, bool kL2, bool kAmsgrad, bool kMaximize>
void adam_scalar(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
                 T* __restrict vmax, std::int64_t begin, std::int64_t n, const AdamConsts<T>& c) {
  for (std::int64_t i = begin; i < n; ++i) {
    T grad = kMaximize ? -g[i] : g[i];
    if (kDecayParam) p[i] = p[i] * c.decay;
    if (kL2) grad = grad + c.wd * p[i];
    m[i] = m[i] * c.b1 + c.one_b1 * grad;
    v[i] = v[i] * c.b2 + c.one_b2 * grad * grad;
    T second = v[i];
    if (kAmsgrad) {
      vmax[i] = std::max(vmax[i], v[i]);
      second = vmax[i];
    }
    const T denom = std::sqrt(second) / c.bc2_sqrt + c.eps;
    p[i] = p[i] + c.neg_step_size * m[i] / denom;
  }
}

// float in 8-wide AVX vectors: the compiler does not vectorise std::sqrt under math-errno.
// Returns how many elements it did.
template <bool kDecayParam, bool kL2, bool kAmsgrad, bool kMaximize>
std::int64_t adam_vector(float* __restrict p, const float* __restrict g, float* __restrict m,
                         float* __restrict v, float* __restrict vmax, std::int64_t n,
                         const AdamConsts<float>& c) {
#if defined(__AVX__)
  const __m256 b1 = _mm256_set1_ps(c.b1), b2 = _mm256_set1_ps(c.b2);
  const __m256 one_b1 = _mm256_set1_ps(c.one_b1), one_b2 = _mm256_set1_ps(c.one_b2);
  const __m256 wd = _mm256_set1_ps(c.wd), eps = _mm256_set1_ps(c.eps);
  const __m256 decay = _mm256_set1_ps(c.decay), nss = _mm256_set1_ps(c.neg_step_size);
  const __m256 bc2_sqrt = _mm256_set1_ps(c.bc2_sqrt), zero = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 pi = _mm256_loadu_ps(p + i);
    __m256 grad = _mm256_loadu_ps(g + i);
    if (kMaximize) grad = _mm256_sub_ps(zero, grad);
    if (kDecayParam) pi = _mm256_mul_ps(pi, decay);
    if (kL2) grad = _mm256_add_ps(grad, _mm256_mul_ps(wd, pi));
    const __m256 mi =
        _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(m + i), b1), _mm256_mul_ps(one_b1, grad));
    const __m256 vi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), b2),
                                    _mm256_mul_ps(_mm256_mul_ps(one_b2, grad), grad));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    __m256 second = vi;
    if (kAmsgrad) {
      second = _mm256_max_ps(_mm256_loadu_ps(vmax + i), vi);
      _mm256_storeu_ps(vmax + i, second);
    }
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(second), bc2_sqrt), eps);
    pi = _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(nss, mi), denom));
    _mm256_storeu_ps(p + i, pi);
  }
  return i;
#else
  (void)p, (void)g, (void)m, (void)v, (void)vmax, (void)n, (void)c;
  return 0;
#endif
}

template <typename T, bool kDecayParam, bool kL2, bool kAmsgrad, bool kMaximize>
void adam_flags(T* p, const T* g, T* m, T* v, T* vmax, std::int64_t n, const AdamConsts<T>& c) {
  std::int64_t done = 0;
  if constexpr (std::is_same_v<T, float>)
    done = adam_vector<kDecayParam, kL2, kAmsgrad, kMaximize>(p, g, m, v, vmax, n, c);
  adam_scalar<T, kDecayParam, kL2, kAmsgrad, kMaximize>(p, g, m, v, vmax, done, n, c);
}

// Turns the runtime flags into template arguments, one at a time.
template <typename T, bool... kFlags, typename... Rest>
void adam_dispatch(T* p, const T* g, T* m, T* v, T* vmax, std::int64_t n, const AdamConsts<T>& c,
                   bool flag, Rest... rest) {
  if constexpr (sizeof...(Rest) == 0) {
    if (flag)
      adam_flags<T, kFlags..., true>(p, g, m, v, vmax, n, c);
    else
      adam_flags<T, kFlags..., false>(p, g, m, v, vmax, n, c);
  } else {
    if (flag)
      adam_dispatch<T, kFlags..., true>(p, g, m, v, vmax, n, c, rest...);
    else
      adam_dispatch<T, kFlags..., false>(p, g, m, v, vmax, n, c, rest...);
  }
}

template <typename T, bool kDecay, bool kMomentum, bool kNesterov, bool kMaximize>
void sgd_flags(T* __restrict p, const T* __restrict g, T* __restrict buf, std::int64_t n,
               const SgdScalars& s) {
  const T wd = static_cast<T>(s.weight_decay), mom = static_cast<T>(s.momentum);
  const T keep = static_cast<T>(1.0 - s.dampening), neg_lr = static_cast<T>(-s.lr);
  const bool first = s.first_step;
  for (std::int64_t i = 0; i < n; ++i) {
    T d = kMaximize ? -g[i] : g[i];
    if (kDecay) d = d + wd * p[i];
    if (kMomentum) {
      buf[i] = first ? d : buf[i] * mom + keep * d;
      d = kNesterov ? d + mom * buf[i] : buf[i];
    }
    p[i] = p[i] + neg_lr * d;
  }
}

template <typename T, bool... kFlags, typename... Rest>
void sgd_dispatch(T* p, const T* g, T* buf, std::int64_t n, const SgdScalars& s, bool flag,
                  Rest... rest) {
  if constexpr (sizeof...(Rest) == 0) {
    if (flag)
      sgd_flags<T, kFlags..., true>(p, g, buf, n, s);
    else
      sgd_flags<T, kFlags..., false>(p, g, buf, n, s);
  } else {
    if (flag)
      sgd_dispatch<T, kFlags..., true>(p, g, buf, n, s, rest...);
    else
      sgd_dispatch<T, kFlags..., false>(p, g, buf, n, s, rest...);
  }
}

}  // namespace

template <typename T>
void adam_update_flat(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, T* max_exp_avg_sq,
                      std::int64_t n, const AdamScalars& s) {
  const AdamConsts<T> c(s);
  const bool wd = s.weight_decay != 0.0;
  parallel_for(0, n, kParallelGrain, [&](std::int64_t b, std::int64_t e) {
    adam_dispatch<T>(param + b, grad + b, exp_avg + b, exp_avg_sq + b,
                     max_exp_avg_sq ? max_exp_avg_sq + b : nullptr, e - b, c, s.decoupled && wd,
                     !s.decoupled && wd, max_exp_avg_sq != nullptr, s.maximize);
  });
}

template <typename T>
void sgd_update_flat(T* param, const T* grad, T* momentum_buffer, std::int64_t n,
                     const SgdScalars& s) {
  sgd_dispatch<T>(param, grad, momentum_buffer, n, s, s.weight_decay != 0.0,
                  momentum_buffer != nullptr, s.nesterov, s.maximize);
}

template void adam_update_flat<float>(float*, const float*, float*, float*, float*, std::int64_t,
                                      const AdamScalars&);
template void adam_update_flat<double>(double*, const double*, double*, double*, double*,
                                       std::int64_t, const AdamScalars&);
template void sgd_update_flat<float>(float*, const float*, float*, std::int64_t, const SgdScalars&);
template void sgd_update_flat<double>(double*, const double*, double*, std::int64_t,
                                      const SgdScalars&);

}  // namespace fsdp::optim
