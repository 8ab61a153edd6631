// Rotary position embedding (Llama's apply_rotary_pos_emb): out (B, H, S, D) contiguous = x cos +
// rotate_half(x) sin, x read through its strides (a (B, S, H, D) projection seen as (B, H, S, D)),
// cos and sin (S, D) or (B, S, D). One thread per rotation pair (j, j + D/2). Each product is
// rounded to the storage type before the sum, as the three torch ops Llama runs do (bf16).
// `transpose` is the backward: out[j] = x[j] c[j] + x[j+h] s[j+h], out[j+h] = x[j+h] c[j+h] -
// x[j] s[j].
#include "core/cuda/cuda_check.h"
#include "core/cuda/kernel_math.cuh"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.h"

namespace fsdp::cuda {
namespace {

template <typename T>
__device__ __forceinline__ float rounded(float v) {
  return to_float(from_float<T>(v));
}

template <typename T, bool kTranspose>
__global__ void rotary_kernel(const T* x, const T* cos, const T* sin, T* out, RotaryGeometry g) {
  const std::int64_t half = g.D / 2, pairs = g.B * g.H * g.S * half;
  for (std::int64_t p = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; p < pairs;
       p += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t j = p % half, row = p / half;
    const std::int64_t i = row % g.S, h = (row / g.S) % g.H, b = row / (g.S * g.H);
    const T* xr = x + b * g.x_batch + h * g.x_head + i * g.x_row;
    const std::int64_t t = b * g.table_batch + i * g.D;
    const float x0 = to_float(xr[j]), x1 = to_float(xr[j + half]);
    const float c0 = to_float(cos[t + j]), c1 = to_float(cos[t + j + half]);
    const float s0 = to_float(sin[t + j]), s1 = to_float(sin[t + j + half]);
    T* o = out + row * g.D;
    if constexpr (kTranspose) {
      o[j] = from_float<T>(rounded<T>(x0 * c0) + rounded<T>(x1 * s1));
      o[j + half] = from_float<T>(rounded<T>(x1 * c1) - rounded<T>(x0 * s0));
    } else {
      o[j] = from_float<T>(rounded<T>(x0 * c0) - rounded<T>(x1 * s0));
      o[j + half] = from_float<T>(rounded<T>(x1 * c1) + rounded<T>(x0 * s1));
    }
  }
}

}  // namespace

template <typename T>
void rotary(const T* x, const T* cos, const T* sin, T* out, const RotaryGeometry& g, bool transpose,
            cudaStream_t stream) {
  const std::int64_t pairs = g.B * g.H * g.S * (g.D / 2);
  if (pairs == 0) return;
  if (transpose)
    rotary_kernel<T, true><<<grid_for(pairs), kThreads, 0, stream>>>(x, cos, sin, out, g);
  else
    rotary_kernel<T, false><<<grid_for(pairs), kThreads, 0, stream>>>(x, cos, sin, out, g);
  FSDP_CUDA_CHECK_LAUNCH();
}

#define FSDP_INSTANTIATE(T)                                                              \
  template void rotary<T>(const T*, const T*, const T*, T*, const RotaryGeometry&, bool, \
                          cudaStream_t);
FSDP_INSTANTIATE(float)
FSDP_INSTANTIATE(bf16)
FSDP_INSTANTIATE(fp16)

}  // namespace fsdp::cuda
