// Helpers of the CPU kernels of torch.nn.functional (core/kernels/cpu/): 16-bit element-wise
// and row-block loops computed in float32 through small buffers, thread grains for rows, and
// optional operands' pointers.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "core/dtype_convert.h"
#include "core/kernel_utils.h"
#include "core/parallel.h"
#include "core/tensor.h"

namespace fsdp::functional {

// Rows of n elements per intra-op thread chunk (core/parallel.h): about kParallelGrain elements.
inline std::int64_t row_grain(std::int64_t n) {
  return std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(n, 1));
}

// An element-wise kernel over contiguous 16-bit tensors of dtype `d`, computed in float32 a
// chunk at a time: each chunk of the inputs is converted into a small buffer, `body(ins, out,
// len)` computes `len` float32 outputs from the float32 inputs ins[0..N), and they are rounded
// into `out`. One pass over memory, no float32 copies of whole tensors.
template <std::size_t N, typename Body>
void map_16bit(DType d, const std::array<const std::uint16_t*, N>& in, std::uint16_t* out,
               std::int64_t n, Body body) {
  constexpr std::int64_t kChunk = 2048;
  alignas(64) float bin[N][kChunk];
  alignas(64) float bout[kChunk];
  std::array<const float*, N> ins;
  for (std::size_t k = 0; k < N; ++k) ins[k] = bin[k];
  for (std::int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const std::int64_t len = std::min(kChunk, n - i0);
    for (std::size_t k = 0; k < N; ++k)
      convert_contiguous(bin[k], DType::Float32, in[k] + i0, d, len);
    body(ins, bout, len);
    convert_contiguous(out + i0, d, bout, DType::Float32, len);
  }
}

// For 16-bit tensors: fn(r0, rows, a, b, c) over blocks of about 16K elements of whole rows
// (at least one row), with three float32 scratch buffers of rows * n elements each.
template <typename F>
void for_row_blocks(std::int64_t m, std::int64_t n, F fn) {
  const std::int64_t rb =
      std::max<std::int64_t>(1, (std::int64_t(1) << 14) / std::max<std::int64_t>(n, 1));
  thread_local std::vector<float> a, b, c;
  const auto size = static_cast<std::size_t>(std::min(rb, m) * n);
  a.resize(size);
  b.resize(size);
  c.resize(size);
  for (std::int64_t r0 = 0; r0 < m; r0 += rb)
    fn(r0, std::min(rb, m - r0), a.data(), b.data(), c.data());
}

// f.template operator()<T>() for the storage type T of a floating dtype (Half and BFloat16 for the
// 16-bit ones, which compute in float through ops_detail::load and store).
template <typename F>
void dispatch_floating(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::BFloat16:
      f.template operator()<BFloat16>();
      return;
    case DType::Float16:
      f.template operator()<Half>();
      return;
    default:
      dispatch_float(dt, op, f);
  }
}

// Data pointer of an optional tensor (weight, bias): null when undefined.
template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace fsdp::functional
