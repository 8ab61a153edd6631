// Device helpers shared by the kernels: float <-> storage conversion and block reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "core/cuda/reduce_geometry.h"

namespace fsdp::cuda {

__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}

// The 16-bit storage types (bf16, fp16): stored, computed in float.
template <typename T>
inline constexpr bool is_16bit_v = std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;

// The accumulation type of a storage type (double stays double; float, bf16 and fp16
// accumulate in float), and loads and stores through it.
template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
__device__ __forceinline__ acc_t<T> load(const T* p) {
  if constexpr (std::is_same_v<T, double>)
    return *p;
  else
    return to_float(*p);
}
template <typename T>
__device__ __forceinline__ void store(T* p, acc_t<T> v) {
  if constexpr (std::is_same_v<T, double>)
    *p = v;
  else
    *p = from_float<T>(v);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The sum (or max) over the block, returned to every thread. `scratch` holds 32 floats; the
// leading __syncthreads lets callers reuse scratch across consecutive reductions.
template <bool kMax>
__device__ float block_reduce(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : (kMax ? -INFINITY : 0.0f);
  r = kMax ? warp_max(r) : warp_sum(r);
  return r;
}
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  return block_reduce<false>(v, scratch);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  return block_reduce<true>(v, scratch);
}

// Column strips (reduce_geometry.h's (kColumnWidth, kColumnRows) blocks, V adjacent columns a
// thread: 1, or a 16-byte pack's when cols is a multiple of it): this thread's first column c0,
// returned, and its partial sums s[j] of column c0 + j over its rows of the block's row chunk;
// add(r, c0, s) adds row r's V values.
template <int V, typename F>
__device__ __forceinline__ std::int64_t column_strip_partials(std::int64_t rows, std::int64_t cols,
                                                              std::int64_t rows_per_chunk,
                                                              float (&s)[V], F add) {
  const std::int64_t c0 = (blockIdx.x * std::int64_t(kColumnWidth) + threadIdx.x) * V;
  const std::int64_t r0 = blockIdx.y * rows_per_chunk;
  const std::int64_t r1 = min(rows, r0 + rows_per_chunk);
#pragma unroll
  for (int j = 0; j < V; ++j) s[j] = 0.0f;
  if (c0 < cols)
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kColumnRows) add(r, c0, s);
  return c0;
}

// Column strips: each thread has summed its V columns over its rows into `s`; the block's row
// partials of each column are folded through `part` (the kernel's __shared__
// float[kColumnRows][kColumnWidth * V], column c0 + j of thread x at [y][j * kColumnWidth + x]:
// a warp's accesses on 32 banks) and added into out[c] with one atomic (out float, or double
// for sums kept wider than the partials).
template <int V, typename Out>
__device__ __forceinline__ void add_column_partials(float (*part)[kColumnWidth * V],
                                                    const float (&s)[V], std::int64_t c0,
                                                    std::int64_t cols, Out* out) {
#pragma unroll
  for (int j = 0; j < V; ++j) part[threadIdx.y][j * kColumnWidth + threadIdx.x] = s[j];
  __syncthreads();
  if (threadIdx.y != 0) return;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    if (c0 + j >= cols) break;
    float t = s[j];
    for (int y = 1; y < kColumnRows; ++y) t += part[y][j * kColumnWidth + threadIdx.x];
    atomicAdd(&out[c0 + j], static_cast<Out>(t));
  }
}

}  // namespace fsdp::cuda
