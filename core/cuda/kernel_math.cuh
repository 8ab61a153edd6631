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

// Column strips (reduce_geometry.h's (kColumnWidth, kColumnRows) blocks): this thread's column
// `c` and its partial sum of value(r, c) over its rows of the block's row chunk.
template <typename F>
__device__ __forceinline__ float column_strip_partial(std::int64_t rows, std::int64_t cols,
                                                      std::int64_t rows_per_chunk, std::int64_t& c,
                                                      F value) {
  c = blockIdx.x * std::int64_t(kColumnWidth) + threadIdx.x;
  const std::int64_t r0 = blockIdx.y * rows_per_chunk;
  const std::int64_t r1 = min(rows, r0 + rows_per_chunk);
  float s = 0.0f;
  if (c < cols)
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kColumnRows) s += value(r, c);
  return s;
}

// Column strips (reduce_geometry.h's (kColumnWidth, kColumnRows) blocks): each thread has summed
// its column over its rows into `s`; the block's row partials of each column are folded through
// `part` (the kernel's __shared__ float[kColumnRows][kColumnWidth + 1]) and added into out[c]
// with one atomic.
__device__ __forceinline__ void add_column_partials(float (*part)[kColumnWidth + 1], float s,
                                                    std::int64_t c, std::int64_t cols, float* out) {
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    for (int y = 1; y < kColumnRows; ++y) s += part[y][threadIdx.x];
    atomicAdd(&out[c], s);
  }
}

}  // namespace fsdp::cuda
