// Branch-free float math and row reductions that the compiler can vectorise. libm's expf/erff
// are opaque calls (one element at a time); these inline polynomial forms let loops over rows
// run in SIMD registers. float uses them; double keeps libm (it is the reference dtype, not the
// hot path). Reductions keep 8 independent partial sums (vectorisable without reassociating
// flags) and fold each block of 512 elements into a double, so long rows stay accurate.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace fsdp::functional {

// Inlined everywhere: a call inside a loop would stop its vectorisation.
#define FSDP_VEC_INLINE inline __attribute__((always_inline))

// exp(x) for float: range reduction x = n ln2 + r, then a degree-6 polynomial for exp(r)
// (Cephes' single-precision coefficients); relative error about 1e-7. Results below float's
// normal range flush to zero; above it, +inf.
FSDP_VEC_INLINE float fast_exp(float x_in) {
  const float x = std::min(std::max(x_in, -87.3f), 88.7f);
  // n = round(x / ln2) by the 1.5 * 2^23 trick: std::floor would stop the vectoriser.
  constexpr float kRound = 12582912.0f;
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const std::uint32_t bits = static_cast<std::uint32_t>(static_cast<std::int32_t>(n) + 127) << 23;
  const float y = p * std::bit_cast<float>(bits);
  // Out of range: selects, not branches, so the loop stays vectorised (NaN passes through y).
  const float lo = x_in < -87.3f ? 0.0f : y;
  return x_in > 88.72f ? std::numeric_limits<float>::infinity() : lo;
}
inline double fast_exp(double x) {
  return std::exp(x);
}

// erf(x) for float: an odd/even rational approximation on [-4, 4] (erf is +-1 in float beyond),
// absolute error below 4e-7; the form used by XLA and Eigen for vectorised erf.
FSDP_VEC_INLINE float fast_erf(float x) {
  x = std::min(std::max(x, -4.0f), 4.0f);
  const float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  float q = -1.45660718464996e-05f;
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  return x * p / q;
}
inline double fast_erf(double x) {
  return std::erf(x);
}

// tanh(x) for float: an odd polynomial near 0 (Cephes), 1 - 2 / (exp(2|x|) + 1) elsewhere;
// both are computed and one selected, so the loop has no branch.
FSDP_VEC_INLINE float fast_tanh(float x) {
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z + -5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z + -3.33332819422e-1f;
  const float small = p * z * x + x;
  const float ax = std::fabs(x);
  const float big = 1.0f - 2.0f / (fast_exp(2.0f * ax) + 1.0f);
  const float large = std::copysign(big, x);
  return ax < 0.625f ? small : large;
}
inline double fast_tanh(double x) {
  return std::tanh(x);
}

inline constexpr std::int64_t kLanes = 8;
inline constexpr std::int64_t kBlock = 512;  // elements summed in T before folding into double

// max over x[0..n) (-inf for n == 0). NaN handling follows std::max, lane by lane.
template <typename T>
T row_max(const T* x, std::int64_t n) {
  T acc[kLanes];
  for (auto& a : acc) a = -std::numeric_limits<T>::infinity();
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::int64_t l = 0; l < kLanes; ++l) acc[l] = std::max(acc[l], x[i + l]);
  T m = -std::numeric_limits<T>::infinity();
  for (; i < n; ++i) m = std::max(m, x[i]);
  for (auto a : acc) m = std::max(m, a);
  return m;
}

// sum over i of f(i), for f returning T; lanes of T within blocks, blocks added in double.
template <typename T, typename F>
double row_sum(std::int64_t n, F&& f) {
  double total = 0;
  for (std::int64_t b = 0; b < n; b += kBlock) {
    const std::int64_t e = std::min(n, b + kBlock);
    T acc[kLanes] = {};
    std::int64_t i = b;
    for (; i + kLanes <= e; i += kLanes)
      for (std::int64_t l = 0; l < kLanes; ++l) acc[l] += f(i + l);
    T tail = 0;
    for (; i < e; ++i) tail += f(i);
    double s = static_cast<double>(tail);
    for (auto a : acc) s += static_cast<double>(a);
    total += s;
  }
  return total;
}

#undef FSDP_VEC_INLINE

}  // namespace fsdp::functional
