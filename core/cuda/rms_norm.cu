// RMS norm over the last dim (LlamaRMSNorm), one warp per row as layer_norm.cu: rstd = 1 /
// sqrt(mean(x^2) + eps) saved in float, y = w * round(x * rstd), round() to the row's storage
// type (Llama's hidden.to(input_dtype) before the weight). The weight has the rows' storage type
// (the kernel table's contract); maths in float. Backward: dx = r gh - x r^3 mean(gh x), gh = g w;
// the weight's gradient sum_r g * round(x * r) by reduce.cu's column strips.
#include <cmath>

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernel_math.cuh"
#include "core/cuda/kernels.h"
#include "core/cuda/reduce_geometry.h"
#include "core/cuda/vec_access.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // 8 warps of 32

// x * r rounded to the storage type (a no-op for float).
template <typename T>
__device__ __forceinline__ float rounded(float v) {
  return to_float(from_float<T>(v));
}

template <typename T>
__global__ void rms_norm_forward_kernel(const T* x, const T* weight, T* y, float* rstd_out,
                                        std::int64_t rows, std::int64_t cols, float eps) {
  const std::int64_t row = blockIdx.x * std::int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;  // whole warps leave together: the shuffles below stay full
  const T* xr = x + row * cols;
  float s = 0.0f;
  for (std::int64_t c = lane; c < cols; c += 32) {
    const float v = to_float(xr[c]);
    s += v * v;
  }
  const float r = 1.0f / sqrtf(warp_sum(s) / cols + eps);  // torch's 1/sqrt, not rsqrtf's
  T* yr = y + row * cols;
  for (std::int64_t c = lane; c < cols; c += 32) {
    const float h = rounded<T>(to_float(xr[c]) * r);
    yr[c] = from_float<T>(weight ? h * to_float(weight[c]) : h);
  }
  if (lane == 0) rstd_out[row] = r;
}

template <typename T>
__global__ void rms_norm_dx_kernel(const T* dy, const T* x, const T* weight, const float* rstd,
                                   T* dx, std::int64_t rows, std::int64_t cols) {
  const std::int64_t row = blockIdx.x * std::int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const T* xr = x + row * cols;
  const T* dyr = dy + row * cols;
  const float r = rstd[row];
  float s = 0.0f;
  for (std::int64_t c = lane; c < cols; c += 32)
    s += to_float(dyr[c]) * (weight ? to_float(weight[c]) : 1.0f) * to_float(xr[c]);
  const float k = warp_sum(s) / cols * r * r * r;
  T* dxr = dx + row * cols;
  for (std::int64_t c = lane; c < cols; c += 32) {
    const float gh = to_float(dyr[c]) * (weight ? to_float(weight[c]) : 1.0f);
    dxr[c] = from_float<T>(r * gh - to_float(xr[c]) * k);
  }
}

// dweight[c] = sum_r dy * round(x * rstd): column strips (V columns a thread, dy and x in 16-byte
// packs when V is the pack's size), chunk sums added with atomics.
template <typename T, int V>
__global__ void rms_norm_dweight_kernel(const T* dy, const T* x, const float* rstd, float* dweight,
                                        std::int64_t rows, std::int64_t cols,
                                        std::int64_t rows_per_chunk) {
  __shared__ float part[kColumnRows][kColumnWidth * V];
  float s[V];
  const std::int64_t c = column_strip_partials<V>(
      rows, cols, rows_per_chunk, s, [&](std::int64_t r, std::int64_t col, float(&acc)[V]) {
        float d[V], v[V];
        load_widened<V>(dy + r * cols + col, d);
        load_widened<V>(x + r * cols + col, v);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += d[j] * rounded<T>(v[j] * rstd[r]);
      });
  add_column_partials<V>(part, s, c, cols, dweight);
}

unsigned row_blocks(std::int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

template <typename T>
void rms_norm_forward(const T* x, const T* weight, T* y, float* rstd, std::int64_t rows,
                      std::int64_t cols, float eps, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  rms_norm_forward_kernel<<<row_blocks(rows), kRowsPerBlock * 32, 0, stream>>>(x, weight, y, rstd,
                                                                               rows, cols, eps);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void rms_norm_backward(const T* dy, const T* x, const T* weight, const float* rstd, T* dx,
                       float* dweight, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  if (cols == 0) return;
  if (dweight) FSDP_CUDA_CHECK(cudaMemsetAsync(dweight, 0, cols * sizeof(float), stream));
  if (rows == 0) return;
  rms_norm_dx_kernel<<<row_blocks(rows), kRowsPerBlock * 32, 0, stream>>>(dy, x, weight, rstd, dx,
                                                                          rows, cols);
  FSDP_CUDA_CHECK_LAUNCH();
  if (!dweight) return;
  launch_column_strips<Pack<T>::kSize>(
      columns_in_packs(cols, dy, x), rows, cols, [&]<int V>(const ColumnReduceGrid& g) {
        rms_norm_dweight_kernel<T, V>
            <<<dim3(g.column_blocks, g.row_chunks), dim3(kColumnWidth, kColumnRows), 0, stream>>>(
                dy, x, rstd, dweight, rows, cols, g.rows_per_chunk);
      });
  FSDP_CUDA_CHECK_LAUNCH();
}

#define FSDP_INSTANTIATE(T)                                                                     \
  template void rms_norm_forward<T>(const T*, const T*, T*, float*, std::int64_t, std::int64_t, \
                                    float, cudaStream_t);                                       \
  template void rms_norm_backward<T>(const T*, const T*, const T*, const float*, T*, float*,    \
                                     std::int64_t, std::int64_t, cudaStream_t);
FSDP_INSTANTIATE(float)
FSDP_INSTANTIATE(bf16)
FSDP_INSTANTIATE(fp16)

}  // namespace fsdp::cuda
