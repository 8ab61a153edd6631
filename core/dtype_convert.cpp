#include "core/dtype_convert.h"

#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace fsdp {

namespace {

void bf16_to_f32(float* dst, const std::uint16_t* src, std::int64_t n) {
  auto* d = reinterpret_cast<std::uint32_t*>(dst);
  for (std::int64_t i = 0; i < n; ++i) d[i] = std::uint32_t(src[i]) << 16;
}

void f32_to_bf16(std::uint16_t* dst, const float* src, std::int64_t n) {
  const auto* s = reinterpret_cast<const std::uint32_t*>(src);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t x = s[i];
    const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    const std::uint32_t nan = (x >> 16) | 0x40u;  // quiet NaN, as float_to_bf16
    dst[i] = std::uint16_t((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
}

void f16_to_f32(float* dst, const std::uint16_t* src, std::int64_t n) {
  std::int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = half_to_float(src[i]);
}

void f32_to_f16(std::uint16_t* dst, const float* src, std::int64_t n) {
  std::int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; ++i) dst[i] = float_to_half(src[i]);
}

template <typename D, typename S>
void plain(D* dst, const S* src, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<D>(src[i]);
}

}  // namespace

bool convert_contiguous(void* dst, DType dd, const void* src, DType sd, std::int64_t n) {
  using F = DType;
  auto* d16 = static_cast<std::uint16_t*>(dst);
  const auto* s16 = static_cast<const std::uint16_t*>(src);
  auto* d32 = static_cast<float*>(dst);
  const auto* s32 = static_cast<const float*>(src);
  if (dd == sd) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * dtype_size(dd));
  } else if (dd == F::Float32 && sd == F::BFloat16) {
    bf16_to_f32(d32, s16, n);
  } else if (dd == F::BFloat16 && sd == F::Float32) {
    f32_to_bf16(d16, s32, n);
  } else if (dd == F::Float32 && sd == F::Float16) {
    f16_to_f32(d32, s16, n);
  } else if (dd == F::Float16 && sd == F::Float32) {
    f32_to_f16(d16, s32, n);
  } else if (dd == F::Float64 && sd == F::Float32) {
    plain(static_cast<double*>(dst), s32, n);
  } else if (dd == F::Float32 && sd == F::Float64) {
    plain(d32, static_cast<const double*>(src), n);
  } else {
    return false;
  }
  return true;
}

}  // namespace fsdp
