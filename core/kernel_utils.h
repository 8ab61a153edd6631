// Internal helpers for op kernels: dtype dispatch, scalar conversion, strided iteration.
#pragma once

#include <array>
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

// The one strided iterator: walks N strided operands of the same (broadcast) sizes in row-major
// order. Dims are coalesced first (size-1 dims dropped), so contiguous operands become one flat
// run. f(offsets, n, inner_strides) handles one inner run of n elements; offsets are in elements,
// relative to each operand's first element. At most 16 dims; no allocation.
template <std::size_t N, typename F>
void for_each_run(const Shape& sizes, const std::array<const Shape*, N>& strides, F&& f) {
  for (auto s : sizes)
    if (s == 0) return;
  FSDP_CHECK(sizes.size() <= 16, ValueError,
             "tensors of more than 16 dimensions are not supported (got {})", sizes.size());
  // Coalesce from the innermost dim outwards: sz[0] is the innermost dim afterwards.
  std::array<std::int64_t, 16> sz{};
  std::array<std::array<std::int64_t, 16>, N> st{};
  std::size_t nd = 0;
  for (std::size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] == 1) continue;
    bool merge = nd > 0;
    if (merge)
      for (std::size_t k = 0; k < N; ++k)
        if ((*strides[k])[d] != st[k][nd - 1] * sz[nd - 1]) merge = false;
    if (merge) {
      sz[nd - 1] *= sizes[d];
    } else {
      sz[nd] = sizes[d];
      for (std::size_t k = 0; k < N; ++k) st[k][nd] = (*strides[k])[d];
      ++nd;
    }
  }
  std::array<std::int64_t, N> off{};
  std::array<std::int64_t, N> inner{};
  if (nd == 0) {
    f(off, std::int64_t{1}, inner);
    return;
  }
  for (std::size_t k = 0; k < N; ++k) inner[k] = st[k][0];
  std::array<std::int64_t, 16> counter{};
  while (true) {
    f(off, sz[0], inner);
    std::size_t d = 1;
    while (true) {
      if (d >= nd) return;
      ++counter[d];
      for (std::size_t k = 0; k < N; ++k) off[k] += st[k][d];
      if (counter[d] < sz[d]) break;
      for (std::size_t k = 0; k < N; ++k) off[k] -= st[k][d] * sz[d];
      counter[d] = 0;
      ++d;
    }
  }
}

// Calls f(offset) for every element of a strided view, in row-major order (for_each_run).
template <typename F>
void for_each_offset(const Shape& sizes, const Shape& strides, F&& f) {
  for_each_run<1>(sizes, {&strides}, [&](const auto& off, std::int64_t n, const auto& inner) {
    for (std::int64_t i = 0; i < n; ++i) f(off[0] + i * inner[0]);
  });
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
  for_each_run<2>(sizes, {&sa, &sb}, [&](const auto& off, std::int64_t n, const auto& inner) {
    for (std::int64_t i = 0; i < n; ++i) f(off[0] + i * inner[0], off[1] + i * inner[1]);
  });
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
