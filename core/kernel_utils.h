// Internal helpers for op kernels: dtype dispatch, scalar conversion, strided iteration.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/tensor.h"

namespace fsdp {

struct Half {
  std::uint16_t bits;
};
struct BFloat16 {
  std::uint16_t bits;
};

template <typename T>
inline double to_double(T v) {
  if constexpr (std::is_same_v<T, Half>)
    return half_to_float(v.bits);
  else if constexpr (std::is_same_v<T, BFloat16>)
    return bf16_to_float(v.bits);
  else
    return static_cast<double>(v);
}

template <typename T>
inline T from_double(double v) {
  if constexpr (std::is_same_v<T, Half>)
    return Half{float_to_half(static_cast<float>(v))};
  else if constexpr (std::is_same_v<T, BFloat16>)
    return BFloat16{float_to_bf16(static_cast<float>(v))};
  else if constexpr (std::is_same_v<T, bool>)
    return v != 0.0;
  else
    return static_cast<T>(v);
}

// f.template operator()<T>() for the C++ type T of `dtype`.
template <typename F>
decltype(auto) dispatch_all(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32:
      return f.template operator()<float>();
    case DType::Float64:
      return f.template operator()<double>();
    case DType::Float16:
      return f.template operator()<Half>();
    case DType::BFloat16:
      return f.template operator()<BFloat16>();
    case DType::Int64:
      return f.template operator()<std::int64_t>();
    case DType::Int32:
      return f.template operator()<std::int32_t>();
    case DType::UInt8:
      return f.template operator()<std::uint8_t>();
    case DType::Bool:
      return f.template operator()<bool>();
  }
  throw TypeError("unknown dtype");
}

// float32/float64 only (compute dtypes); names the op in the error otherwise.
template <typename F>
decltype(auto) dispatch_float(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::Float32:
      return f.template operator()<float>();
    case DType::Float64:
      return f.template operator()<double>();
    default:
      throw TypeError(fmt::format("{}: not implemented for dtype {} (expected float32 or float64)",
                                  op, dtype_name(dtype)));
  }
}

inline double load_double(const void* base, DType dtype, std::int64_t index) {
  return dispatch_all(dtype,
                      [&]<typename T>() { return to_double(static_cast<const T*>(base)[index]); });
}
inline void store_double(void* base, DType dtype, std::int64_t index, double v) {
  dispatch_all(dtype, [&]<typename T>() { static_cast<T*>(base)[index] = from_double<T>(v); });
}

// Calls f(offset) for every element of a strided view, in row-major order. Offsets are in
// elements, relative to the view's first element.
template <typename F>
void for_each_offset(const Shape& sizes, const Shape& strides, F&& f) {
  const std::size_t nd = sizes.size();
  for (auto s : sizes)
    if (s == 0) return;
  if (nd == 0) {
    f(std::int64_t{0});
    return;
  }
  std::int64_t counter[16] = {0};
  FSDP_CHECK(nd <= 16, ValueError, "tensors of more than 16 dimensions are not supported (got {})",
             nd);
  const std::int64_t inner = sizes[nd - 1], inner_stride = strides[nd - 1];
  std::int64_t base = 0;
  while (true) {
    for (std::int64_t i = 0; i < inner; ++i) f(base + i * inner_stride);
    if (nd == 1) return;
    std::size_t d = nd - 2;
    while (true) {
      ++counter[d];
      base += strides[d];
      if (counter[d] < sizes[d]) break;
      base -= strides[d] * sizes[d];
      counter[d] = 0;
      if (d == 0) return;
      --d;
    }
  }
}

// Throws naming `op` if the tensor is not on the cpu (or meta when allowed).
inline void check_cpu(const Tensor& t, const char* op) {
  FSDP_CHECK(t.device().is_cpu(), NotImplementedError,
             "{}: not implemented for device {} (tensor of shape {})", op, t.device().str(),
             shape_str(t.shape()));
  check_storage_alive(t, op);
}

}  // namespace fsdp

namespace fsdp {

// Like for_each_offset, walking two strided layouts of the same sizes together: f(oa, ob).
template <typename F>
void for_each_offset2(const Shape& sizes, const Shape& sa, const Shape& sb, F&& f) {
  const std::size_t nd = sizes.size();
  for (auto s : sizes)
    if (s == 0) return;
  if (nd == 0) {
    f(std::int64_t{0}, std::int64_t{0});
    return;
  }
  FSDP_CHECK(nd <= 16, ValueError, "tensors of more than 16 dimensions are not supported (got {})",
             nd);
  std::int64_t counter[16] = {0};
  const std::int64_t inner = sizes[nd - 1], ia = sa[nd - 1], ib = sb[nd - 1];
  std::int64_t a = 0, b = 0;
  while (true) {
    for (std::int64_t i = 0; i < inner; ++i) f(a + i * ia, b + i * ib);
    if (nd == 1) return;
    std::size_t d = nd - 2;
    while (true) {
      ++counter[d];
      a += sa[d];
      b += sb[d];
      if (counter[d] < sizes[d]) break;
      a -= sa[d] * sizes[d];
      b -= sb[d] * sizes[d];
      counter[d] = 0;
      if (d == 0) return;
      --d;
    }
  }
}

// Strides that read `t` as if expanded to `shape` (0 on broadcast dims). Shapes must broadcast.
inline Shape broadcast_strides(const Tensor& t, const Shape& shape) {
  Shape out(shape.size(), 0);
  const auto& ts = t.shape();
  const auto& st = t.strides();
  std::size_t off = shape.size() - ts.size();
  for (std::size_t i = 0; i < ts.size(); ++i) out[off + i] = ts[i] == 1 ? 0 : st[i];
  return out;
}

}  // namespace fsdp
