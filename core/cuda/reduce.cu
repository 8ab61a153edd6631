// Reductions with float accumulation: column sums (a linear layer's bias gradient, rows read in
// 16-byte packs where aligned) and the sum of squares (clip_grad_norm_). Both split the long
// dimension over blocks and add the blocks' partial sums with float atomics into a zeroed output:
// enough parallelism for 768 columns of 16K rows, at the price of a last-bit order dependence
// between runs.
#include "core/cuda/cuda_check.h"
#include "core/cuda/kernel_math.cuh"
#include "core/cuda/kernels.h"
#include "core/cuda/reduce_geometry.h"
#include "core/cuda/vec_access.cuh"

namespace fsdp::cuda {
namespace {

// Block (32, 8): threadIdx.x walks 32 adjacent groups of V columns (coalesced: a row's
// 32 * V * sizeof(T) bytes in 16-byte packs when V is the pack's size), threadIdx.y 8 rows of the
// block's row chunk; shared memory folds the 8 row partials before one atomic per column.
template <typename T, int V>
__global__ void sum_over_rows_kernel(const T* in, float* out, std::int64_t rows, std::int64_t cols,
                                     std::int64_t rows_per_chunk) {
  __shared__ float partial[kColumnRows][kColumnWidth * V];
  float s[V];
  const std::int64_t c0 = column_strip_partials<V>(
      rows, cols, rows_per_chunk, s, [&](std::int64_t r, std::int64_t c, float(&acc)[V]) {
        float v[V];
        load_widened<V>(in + r * cols + c, v);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += v[j];
      });
  add_column_partials<V>(partial, s, c0, cols, out);
}

template <typename T>
__global__ void sum_of_squares_kernel(const T* x, float* out, std::int64_t n) {
  __shared__ float scratch[32];
  float s = 0.0f;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const float v = to_float(x[i]);
    s += v * v;
  }
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) atomicAdd(out, s);
}

}  // namespace

template <typename T>
void sum_over_rows(const T* in, float* out, std::int64_t rows, std::int64_t cols,
                   cudaStream_t stream) {
  if (cols == 0) return;
  FSDP_CUDA_CHECK(cudaMemsetAsync(out, 0, cols * sizeof(float), stream));
  if (rows == 0) return;
  launch_column_strips<Pack<T>::kSize>(
      columns_in_packs(cols, in), rows, cols, [&]<int V>(const ColumnReduceGrid& g) {
        sum_over_rows_kernel<T, V>
            <<<dim3(g.column_blocks, g.row_chunks), dim3(kColumnWidth, kColumnRows), 0, stream>>>(
                in, out, rows, cols, g.rows_per_chunk);
      });
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void sum_of_squares(const T* x, float* out, std::int64_t n, cudaStream_t stream) {
  FSDP_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float), stream));
  if (n == 0) return;
  sum_of_squares_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, out, n);
  FSDP_CUDA_CHECK_LAUNCH();
}

#define FSDP_INSTANTIATE(T)                                                                   \
  template void sum_over_rows<T>(const T*, float*, std::int64_t, std::int64_t, cudaStream_t); \
  template void sum_of_squares<T>(const T*, float*, std::int64_t, cudaStream_t);
FSDP_INSTANTIATE(float)
FSDP_INSTANTIATE(bf16)
FSDP_INSTANTIATE(fp16)

}  // namespace fsdp::cuda
