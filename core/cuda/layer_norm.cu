// Layer norm over the last dim, one warp per row (GPT rows are 768 wide: 24 values a lane),
// read and written in 16-byte packs (vec_access.cuh: 3 packs a lane for a bf16 GPT row).
// Forward saves mean and rstd in float; backward recomputes x-hat from them. The statistics are
// two passes (mean, then the centred sum of squares) rather than E[x^2] - E[x]^2, which cancels
// badly when |mean| >> std. Null weight/bias mean no affine part (elementwise_affine=False).
// Rows are float or 16-bit; the weight and bias float or the rows' 16-bit type (read as they
// are: no cast kernel before each call), the statistics float.
//
// Backward is one pass over dy and x (llm.c's design): each warp writes its rows' dx and adds
// their dweight/dbias terms into its own partial sums (shared memory, no atomics), each block
// writes one partial row, and a small kernel sums the partial rows in a fixed order (in
// double) into dweight/dbias in the parameters' type. The grid is a constant, so the order of
// every sum, and the bits of the result, never vary.
#include <algorithm>

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernel_math.cuh"
#include "core/cuda/kernels.h"
#include "core/cuda/vec_access.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // forward: 8 warps of 32

// Backward: 4 warps a block, each with its partial sums of up to kSharedCols columns in shared
// memory (33 KiB a block: 6 blocks fit an H100 SM). Wider rows keep each warp's partial sums in
// the scratch instead (global memory, cached), with fewer blocks so that the scratch stays small.
constexpr int kBackwardWarps = 4;
constexpr std::int64_t kSharedCols = 1024;
constexpr std::int64_t kBackwardBlocks = 512, kBackwardBlocksWide = 128;
constexpr int kReduceRows = 32;  // the partials kernel: 32 columns x 32 partial rows a block

// A warp's partial sums in shared memory hold column c at slot (c % 8) * stride + c / 8, the
// stride at least cols / 8 and 4 more than a multiple of 32: a pack's j-th values (8 or 4
// columns a lane) and single columns a lane (8 groups of 4 lanes) then fall in 32 distinct
// banks, where column order would put a pack's lanes 8 floats apart (8-way bank conflicts).
__host__ __device__ constexpr std::int64_t shared_stride(std::int64_t cols) {
  const std::int64_t groups = (cols + 7) / 8;
  return ((groups > 4 ? groups : 4) - 4 + 31) / 32 * 32 + 4;
}
constexpr std::int64_t kSharedStride = shared_stride(kSharedCols);

struct BackwardGrid {
  unsigned blocks;
  std::int64_t partial_rows;  // rows of 2 * cols floats (dweight's sums, then dbias's)
  bool shared;                // partial sums per warp in shared memory, one row a block
};

BackwardGrid backward_grid(std::int64_t rows, std::int64_t cols) {
  const bool shared = cols <= kSharedCols;
  const std::int64_t row_groups = (rows + kBackwardWarps - 1) / kBackwardWarps;
  const auto blocks =
      static_cast<unsigned>(std::min(row_groups, shared ? kBackwardBlocks : kBackwardBlocksWide));
  return {blocks, shared ? std::int64_t(blocks) : std::int64_t(blocks) * kBackwardWarps, shared};
}

template <typename P>
__device__ __forceinline__ float param_or(const P* p, std::int64_t c, float otherwise) {
  return p ? to_float(p[c]) : otherwise;
}

template <typename T, typename P>
__global__ void layer_norm_forward_kernel(const T* x, const P* weight, const P* bias, T* y,
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
    return (v - mean) * rstd * param_or(weight, c, 1.0f) + param_or(bias, c, 0.0f);
  });
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * weight, a warp per row (rows
// strided by the grid's warps); with `partials`, the warp's sums of dy * xhat (dweight) and dy
// (dbias) over its rows, per column, then one partial row per block (kShared) or per warp.
template <typename T, typename P, bool kShared>
__global__ void layer_norm_backward_kernel(const T* dy, const T* x, const P* weight,
                                           const float* mean, const float* rstd, T* dx,
                                           float* partials, std::int64_t rows, std::int64_t cols) {
  __shared__ float warp_sums[kShared ? kBackwardWarps : 1][kShared ? 16 * kSharedStride : 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const std::int64_t stride = shared_stride(cols);
  const auto slot = [&](std::int64_t c) { return kShared ? (c % 8) * stride + c / 8 : c; };
  const std::int64_t half = kShared ? 8 * stride : cols;  // dbias's sums after dweight's
  float* acc = nullptr;
  if (partials)
    acc = kShared ? warp_sums[warp]
                  : partials + (std::int64_t(blockIdx.x) * kBackwardWarps + warp) * 2 * cols;
  if (acc) {
    for (std::int64_t k = lane; k < 2 * half; k += 32) acc[k] = 0.0f;
    __syncwarp();
  }
  constexpr int V = Pack<T>::kSize;
  const std::int64_t row_stride = std::int64_t(gridDim.x) * kBackwardWarps;
  for (std::int64_t row = std::int64_t(blockIdx.x) * kBackwardWarps + warp; row < rows;
       row += row_stride) {  // uniform per warp: the shuffles stay full
    const T* xr = x + row * cols;
    const T* dyr = dy + row * cols;
    T* dxr = dx + row * cols;
    const float m = mean[row], r = rstd[row];
    // dy, x and dx of the row in 16-byte packs where the three share their alignment.
    const RowSplit split = row_split(cols, xr, dyr, dxr);
    float sg = 0.0f, sgx = 0.0f;
    const auto sum = [&](std::int64_t c, float d, float v) {
      const float g = d * param_or(weight, c, 1.0f);
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
    // The second pass reads the row again from L1/L2 (a warp's row is 1.5 KiB in bf16).
    const auto grad = [&](std::int64_t c, float d, float v) {
      const float xhat = (v - m) * r;
      if (acc) {  // column c is this lane's alone in this row
        acc[slot(c)] += d * xhat;
        acc[half + slot(c)] += d;
      }
      return r * (d * param_or(weight, c, 1.0f) - mg - xhat * mgx);
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
    __syncwarp();  // another row's split may give column c to another lane
  }
  if (!kShared || !acc) return;  // the same for the whole block
  __syncthreads();
  // The block's partial row, in column order: its warps' sums added in warp order.
  float* out = partials + std::int64_t(blockIdx.x) * 2 * cols;
  for (std::int64_t k = threadIdx.x; k < 2 * cols; k += blockDim.x) {
    const std::int64_t at = (k < cols ? 0 : half) + slot(k < cols ? k : k - cols);
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kBackwardWarps; ++w) s += warp_sums[w][at];
    out[k] = s;
  }
}

// dweight[c] and dbias[c]: the partial rows' column sums in double, in a fixed order (each
// thread every 32nd row from its own, then the 32 threads' sums in order), in P. No partial
// rows (no rows) give zeros.
template <typename P>
__global__ void layer_norm_param_grads_kernel(const float* partials, std::int64_t partial_rows,
                                              std::int64_t cols, P* dweight, P* dbias) {
  __shared__ double sums[kReduceRows][32];
  const std::int64_t k = std::int64_t(blockIdx.x) * 32 + threadIdx.x;  // of 2 * cols
  double s = 0.0;
  if (k < 2 * cols) {
#pragma unroll 8
    for (std::int64_t p = threadIdx.y; p < partial_rows; p += kReduceRows)
      s += partials[p * 2 * cols + k];
  }
  sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || k >= 2 * cols) return;
  double total = 0.0;
  for (int i = 0; i < kReduceRows; ++i) total += sums[i][threadIdx.x];
  P* out = k < cols ? dweight : dbias;
  if (out) out[k < cols ? k : k - cols] = from_float<P>(static_cast<float>(total));
}

unsigned row_blocks(std::int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

template <typename T, typename P>
void layer_norm_forward(const T* x, const P* weight, const P* bias, T* y, float* mean, float* rstd,
                        std::int64_t rows, std::int64_t cols, float eps, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  layer_norm_forward_kernel<<<row_blocks(rows), kRowsPerBlock * 32, 0, stream>>>(
      x, weight, bias, y, mean, rstd, rows, cols, eps);
  FSDP_CUDA_CHECK_LAUNCH();
}

std::int64_t layer_norm_backward_scratch(std::int64_t rows, std::int64_t cols) {
  return backward_grid(rows, cols).partial_rows * 2 * cols;
}

template <typename T, typename P>
void layer_norm_backward(const T* dy, const T* x, const P* weight, const float* mean,
                         const float* rstd, T* dx, P* dweight, P* dbias, float* scratch,
                         std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  if (cols == 0) return;
  const bool params = dweight || dbias;
  const BackwardGrid g = backward_grid(rows, cols);
  float* partials = params ? scratch : nullptr;
  if (rows > 0 && g.shared)
    layer_norm_backward_kernel<T, P, true><<<g.blocks, kBackwardWarps * 32, 0, stream>>>(
        dy, x, weight, mean, rstd, dx, partials, rows, cols);
  else if (rows > 0)
    layer_norm_backward_kernel<T, P, false><<<g.blocks, kBackwardWarps * 32, 0, stream>>>(
        dy, x, weight, mean, rstd, dx, partials, rows, cols);
  if (rows > 0) FSDP_CUDA_CHECK_LAUNCH();
  if (!params) return;
  const auto column_blocks = static_cast<unsigned>((2 * cols + 31) / 32);
  layer_norm_param_grads_kernel<<<column_blocks, dim3(32, kReduceRows), 0, stream>>>(
      scratch, g.partial_rows, cols, dweight, dbias);
  FSDP_CUDA_CHECK_LAUNCH();
}

#define FSDP_INSTANTIATE(T, P)                                                             \
  template void layer_norm_forward<T, P>(const T*, const P*, const P*, T*, float*, float*, \
                                         std::int64_t, std::int64_t, float, cudaStream_t); \
  template void layer_norm_backward<T, P>(const T*, const T*, const P*, const float*,      \
                                          const float*, T*, P*, P*, float*, std::int64_t,  \
                                          std::int64_t, cudaStream_t);
FSDP_INSTANTIATE(float, float)
FSDP_INSTANTIATE(bf16, float)
FSDP_INSTANTIATE(bf16, bf16)
FSDP_INSTANTIATE(fp16, float)
FSDP_INSTANTIATE(fp16, fp16)

}  // namespace fsdp::cuda
