// Layer norm over the last dim, one warp per row (GPT rows are 768 wide: 24 values a lane),
// read and written in 16-byte packs (vec_access.cuh: 3 packs a lane for a bf16 GPT row).
// Forward saves mean and rstd in float; backward recomputes x-hat from them. The statistics are
// two passes (mean, then the centred sum of squares) rather than E[x^2] - E[x]^2, which cancels
// badly when |mean| >> std. Null weight/bias mean no affine part (elementwise_affine=False).
// Rows are float or bf16; the weight, bias and statistics are float in both cases (torch's
// layer norm on 16-bit rows keeps its parameters in float under mixed precision).
#include "core/cuda/cuda_check.h"
#include "core/cuda/kernel_math.cuh"
#include "core/cuda/kernels.h"
#include "core/cuda/reduce_geometry.h"
#include "core/cuda/vec_access.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // 8 warps of 32

template <typename T>
__global__ void layer_norm_forward_kernel(const T* x, const float* weight, const float* bias, T* y,
                                          float* mean_out, float* rstd_out, std::int64_t rows,
                                          std::int64_t cols, float eps) {
  const std::int64_t row = blockIdx.x * std::int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;  // whole warps leave together: the shuffles below stay full
  const T* xr = x + row * cols;
  float s = 0.0f;
  for_each_in_row(xr, cols, lane, 32, [&](std::int64_t, float v) { s += v; });
  const float mean = warp_sum(s) / cols;
  float var = 0.0f;
  for_each_in_row(xr, cols, lane, 32,
                  [&](std::int64_t, float v) { var += (v - mean) * (v - mean); });
  const float rstd = rsqrtf(warp_sum(var) / cols + eps);  // biased variance, as torch
  map_row(xr, y + row * cols, cols, lane, 32, [&](std::int64_t c, float v) {
    float h = (v - mean) * rstd;
    if (weight) h *= weight[c];
    if (bias) h += bias[c];
    return h;
  });
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * weight.
template <typename T>
__global__ void layer_norm_dx_kernel(const T* dy, const T* x, const float* weight,
                                     const float* mean, const float* rstd, T* dx, std::int64_t rows,
                                     std::int64_t cols) {
  const std::int64_t row = blockIdx.x * std::int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const T* xr = x + row * cols;
  const T* dyr = dy + row * cols;
  T* dxr = dx + row * cols;
  const float m = mean[row], r = rstd[row];
  constexpr int V = Pack<T>::kSize;
  // dy, x and dx of the row in 16-byte packs where the three share their alignment.
  const RowSplit split = row_split(cols, xr, dyr, dxr);
  float sg = 0.0f, sgx = 0.0f;
  const auto sum = [&](std::int64_t c, float d, float v) {
    const float g = d * (weight ? weight[c] : 1.0f);
    sg += g;
    sgx += g * (v - m) * r;
  };
  visit_row<T>(
      cols, split, lane, 32, [&](std::int64_t c) { sum(c, to_float(dyr[c]), to_float(xr[c])); },
      [&](std::int64_t k0) {
        float d[V], v[V];
        load_widened<V>(dyr + k0, d);
        load_widened<V>(xr + k0, v);
#pragma unroll
        for (int j = 0; j < V; ++j) sum(k0 + j, d[j], v[j]);
      });
  const float mg = warp_sum(sg) / cols, mgx = warp_sum(sgx) / cols;
  const auto grad = [&](std::int64_t c, float d, float v) {
    const float g = d * (weight ? weight[c] : 1.0f);
    const float xhat = (v - m) * r;
    return r * (g - mg - xhat * mgx);
  };
  visit_row<T>(
      cols, split, lane, 32,
      [&](std::int64_t c) { store(dxr + c, grad(c, to_float(dyr[c]), to_float(xr[c]))); },
      [&](std::int64_t k0) {
        float d[V], v[V];
        load_widened<V>(dyr + k0, d);
        load_widened<V>(xr + k0, v);
#pragma unroll
        for (int j = 0; j < V; ++j) d[j] = grad(k0 + j, d[j], v[j]);
        store_narrowed<V>(dxr + k0, d);
      });
}

// dweight[c] = sum_r dy * xhat, dbias[c] = sum_r dy: reduce.cu's column-strip layout, V columns a
// thread (dy and x read in 16-byte packs when V is the pack's size).
template <typename T, int V, typename Acc>
__global__ void layer_norm_dparams_kernel(const T* dy, const T* x, const float* mean,
                                          const float* rstd, Acc* dweight, Acc* dbias,
                                          std::int64_t rows, std::int64_t cols,
                                          std::int64_t rows_per_chunk) {
  __shared__ float pw[kColumnRows][kColumnWidth * V], pb[kColumnRows][kColumnWidth * V];
  float sw[V], sb[V] = {};
  const std::int64_t c0 = column_strip_partials<V>(
      rows, cols, rows_per_chunk, sw, [&](std::int64_t r, std::int64_t c, float(&acc)[V]) {
        float d[V], v[V];
        load_widened<V>(dy + r * cols + c, d);
        load_widened<V>(x + r * cols + c, v);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          acc[j] += d[j] * (v[j] - mean[r]) * rstd[r];
          sb[j] += d[j];
        }
      });
  if (dweight) add_column_partials<V>(pw, sw, c0, cols, dweight);  // the same for every thread
  if (dbias) add_column_partials<V>(pb, sb, c0, cols, dbias);
}

unsigned row_blocks(std::int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

template <typename T>
void layer_norm_forward(const T* x, const float* weight, const float* bias, T* y, float* mean,
                        float* rstd, std::int64_t rows, std::int64_t cols, float eps,
                        cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  layer_norm_forward_kernel<<<row_blocks(rows), kRowsPerBlock * 32, 0, stream>>>(
      x, weight, bias, y, mean, rstd, rows, cols, eps);
  FSDP_CUDA_CHECK_LAUNCH();
}

namespace {

// The backward's passes; the parameter gradients are added into dweight/dbias (Acc: float,
// zeroed first by the float launcher; double, the kernel table's float64 sums, added to).
template <typename T, typename Acc>
void layer_norm_backward_into(const T* dy, const T* x, const float* weight, const float* mean,
                              const float* rstd, T* dx, Acc* dweight, Acc* dbias, std::int64_t rows,
                              std::int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  layer_norm_dx_kernel<<<row_blocks(rows), kRowsPerBlock * 32, 0, stream>>>(dy, x, weight, mean,
                                                                            rstd, dx, rows, cols);
  FSDP_CUDA_CHECK_LAUNCH();
  if (!dweight && !dbias) return;
  launch_column_strips<Pack<T>::kSize>(
      columns_in_packs(cols, dy, x), rows, cols, [&]<int V>(const ColumnReduceGrid& g) {
        layer_norm_dparams_kernel<T, V, Acc>
            <<<dim3(g.column_blocks, g.row_chunks), dim3(kColumnWidth, kColumnRows), 0, stream>>>(
                dy, x, mean, rstd, dweight, dbias, rows, cols, g.rows_per_chunk);
      });
  FSDP_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void layer_norm_backward(const T* dy, const T* x, const float* weight, const float* mean,
                         const float* rstd, T* dx, float* dweight, float* dbias, std::int64_t rows,
                         std::int64_t cols, cudaStream_t stream) {
  if (cols == 0) return;
  if (dweight) FSDP_CUDA_CHECK(cudaMemsetAsync(dweight, 0, cols * sizeof(float), stream));
  if (dbias) FSDP_CUDA_CHECK(cudaMemsetAsync(dbias, 0, cols * sizeof(float), stream));
  layer_norm_backward_into(dy, x, weight, mean, rstd, dx, dweight, dbias, rows, cols, stream);
}

template <typename T>
void layer_norm_backward_accumulate(const T* dy, const T* x, const float* weight, const float* mean,
                                    const float* rstd, T* dx, double* dweight, double* dbias,
                                    std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  layer_norm_backward_into(dy, x, weight, mean, rstd, dx, dweight, dbias, rows, cols, stream);
}

#define FSDP_INSTANTIATE(T)                                                                       \
  template void layer_norm_forward<T>(const T*, const float*, const float*, T*, float*, float*,   \
                                      std::int64_t, std::int64_t, float, cudaStream_t);           \
  template void layer_norm_backward<T>(const T*, const T*, const float*, const float*,            \
                                       const float*, T*, float*, float*, std::int64_t,            \
                                       std::int64_t, cudaStream_t);                               \
  template void layer_norm_backward_accumulate<T>(const T*, const T*, const float*, const float*, \
                                                  const float*, T*, double*, double*,             \
                                                  std::int64_t, std::int64_t, cudaStream_t);
FSDP_INSTANTIATE(float)
FSDP_INSTANTIATE(bf16)
FSDP_INSTANTIATE(fp16)

}  // namespace fsdp::cuda
