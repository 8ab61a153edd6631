// Causal softmax over attention scores (batch, T, T), one warp per row: row i of a (b, i) pair
// sees keys 0..i, and the masked keys are written as exact zeros (no -inf arithmetic, so no NaN
// from a fully masked row: row 0 always keeps key 0). The scale 1/sqrt(head_dim) is folded in
// here rather than in a separate pass over the scores.
#include "core/cuda/cuda_check.h"
#include "core/cuda/kernel_math.cuh"
#include "core/cuda/kernels.h"

namespace fsdp::cuda {
namespace {

constexpr int kRowsPerBlock = 8;

template <typename T>
__global__ void causal_softmax_forward_kernel(const T* x, T* y, std::int64_t rows, std::int64_t t,
                                              float scale) {
  const std::int64_t row = blockIdx.x * std::int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const std::int64_t keep = row % t + 1;  // keys 0..i
  const T* xr = x + row * t;
  T* yr = y + row * t;
  float m = -INFINITY;
  for (std::int64_t j = lane; j < keep; j += 32) m = fmaxf(m, scale * to_float(xr[j]));
  m = warp_max(m);
  float s = 0.0f;
  for (std::int64_t j = lane; j < keep; j += 32) s += expf(scale * to_float(xr[j]) - m);
  const float inv = 1.0f / warp_sum(s);
  for (std::int64_t j = lane; j < t; j += 32)
    yr[j] = from_float<T>(j < keep ? expf(scale * to_float(xr[j]) - m) * inv : 0.0f);
}

template <typename T>
__global__ void causal_softmax_backward_kernel(const T* y, const T* dy, T* dx, std::int64_t rows,
                                               std::int64_t t, float scale) {
  const std::int64_t row = blockIdx.x * std::int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const std::int64_t keep = row % t + 1;
  const T* yr = y + row * t;
  const T* dyr = dy + row * t;
  T* dxr = dx + row * t;
  float s = 0.0f;
  for (std::int64_t j = lane; j < keep; j += 32) s += to_float(dyr[j]) * to_float(yr[j]);
  s = warp_sum(s);
  for (std::int64_t j = lane; j < t; j += 32)
    dxr[j] = from_float<T>(j < keep ? scale * to_float(yr[j]) * (to_float(dyr[j]) - s) : 0.0f);
}

unsigned row_blocks(std::int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

template <typename T>
void causal_softmax_forward(const T* x, T* y, std::int64_t batch, std::int64_t t, float scale,
                            cudaStream_t stream) {
  if (batch == 0 || t == 0) return;
  causal_softmax_forward_kernel<<<row_blocks(batch * t), kRowsPerBlock * 32, 0, stream>>>(
      x, y, batch * t, t, scale);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void causal_softmax_backward(const T* y, const T* dy, T* dx, std::int64_t batch, std::int64_t t,
                             float scale, cudaStream_t stream) {
  if (batch == 0 || t == 0) return;
  causal_softmax_backward_kernel<<<row_blocks(batch * t), kRowsPerBlock * 32, 0, stream>>>(
      y, dy, dx, batch * t, t, scale);
  FSDP_CUDA_CHECK_LAUNCH();
}

#define FSDP_INSTANTIATE(T)                                                                    \
  template void causal_softmax_forward<T>(const T*, T*, std::int64_t, std::int64_t, float,     \
                                          cudaStream_t);                                       \
  template void causal_softmax_backward<T>(const T*, const T*, T*, std::int64_t, std::int64_t, \
                                           float, cudaStream_t);
FSDP_INSTANTIATE(float)
FSDP_INSTANTIATE(bf16)
FSDP_INSTANTIATE(fp16)

}  // namespace fsdp::cuda
