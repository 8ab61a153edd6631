// Element types shared by every layer (core tensors, comm buffers, model files).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <string_view>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "core/error.h"

namespace fsdp {

enum class DType : std::uint8_t { Float32, Float64, Float16, BFloat16, Int64, Int32, UInt8, Bool };

inline constexpr DType kAllDTypes[] = {DType::Float32,  DType::Float64, DType::Float16,
                                       DType::BFloat16, DType::Int64,   DType::Int32,
                                       DType::UInt8,    DType::Bool};

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32:
      return 4;
    case DType::Float64:
      return 8;
    case DType::Float16:
      return 2;
    case DType::BFloat16:
      return 2;
    case DType::Int64:
      return 8;
    case DType::Int32:
      return 4;
    case DType::UInt8:
      return 1;
    case DType::Bool:
      return 1;
  }
  return 0;
}

// PyTorch's spelling without the "torch." prefix: "float32", "bfloat16", "int64", "bool".
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Int64:
      return "int64";
    case DType::Int32:
      return "int32";
    case DType::UInt8:
      return "uint8";
    case DType::Bool:
      return "bool";
  }
  return "?";
}

constexpr bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}

// Accepts PyTorch's names and aliases ("float", "double", "half", "long", "int").
inline DType dtype_from_name(std::string_view s) {
  if (s.substr(0, 6) == "torch.") s.remove_prefix(6);
  if (s == "float32" || s == "float") return DType::Float32;
  if (s == "float64" || s == "double") return DType::Float64;
  if (s == "float16" || s == "half") return DType::Float16;
  if (s == "bfloat16") return DType::BFloat16;
  if (s == "int64" || s == "long") return DType::Int64;
  if (s == "int32" || s == "int") return DType::Int32;
  if (s == "uint8") return DType::UInt8;
  if (s == "bool") return DType::Bool;
  throw ValueError("unknown dtype '" + std::string(s) +
                   "' (expected float32, float64, float16, bfloat16, int64, int32, "
                   "uint8 or bool)");
}

inline std::ostream& operator<<(std::ostream& os, DType t) {
  return os << dtype_name(t);
}

// IEEE binary16 <-> float, round to nearest even (one F16C instruction where the CPU has it).
inline float half_to_float(std::uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  std::uint32_t sign = (std::uint32_t(h) & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1f;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

inline std::uint16_t float_to_half(float f) {
#if defined(__F16C__)
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  std::uint32_t sign = (x >> 16) & 0x8000u;
  std::uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or nan
    return std::uint16_t(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  }
  if (absx >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);  // overflow -> inf
  if (absx < 0x38800000u) {                                       // subnormal or zero in half
    if (absx < 0x33000000u) return std::uint16_t(sign);
    std::uint32_t e = absx >> 23;                      // 102..112 here
    std::uint32_t m = (absx & 0x7fffffu) | 0x800000u;  // 24-bit significand
    std::uint32_t s = 126 - e;                         // bits dropped: 14..24
    std::uint32_t r = m >> s;
    std::uint32_t rem = m & ((1u << s) - 1);
    std::uint32_t halfway = 1u << (s - 1);
    if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
    return std::uint16_t(sign | r);
  }
  std::uint32_t r = absx + 0xc8000000u;  // rebias exponent (127-15) << 23, subtracted
  std::uint32_t lsb = (r >> 13) & 1u;
  r += 0xfffu + lsb;
  return std::uint16_t(sign | (r >> 13));
#endif
}

inline float bf16_to_float(std::uint16_t b) {
  std::uint32_t bits = std::uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  // Round to nearest even; a NaN stays a (quiet) NaN. A select, not a branch, so loops of
  // conversions vectorise.
  const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const std::uint32_t nan = (x >> 16) | 0x40u;
  return std::uint16_t((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

}  // namespace fsdp
