// Softmax and log-softmax along any dim of a contiguous tensor read as (outer, n, inner), and
// their backward: one block per row (an (outer, inner) pair), its threads striding over the n
// elements `inner` apart; max and sums by a shared-memory tree. Accumulation in float (double
// for double storage). A row of -inf gives NaN, as torch's and the CPU's.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernel_math.cuh"
#include "core/cuda/kernels.h"

namespace fsdp::cuda {
namespace {

constexpr int kRowThreads = 256;

// The block's max (kMax) or sum of v, returned to every thread.
template <bool kMax, typename C>
__device__ C block_all(C v, C* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const C other = scratch[threadIdx.x + half];
      scratch[threadIdx.x] = kMax ? (other > scratch[threadIdx.x] ? other : scratch[threadIdx.x])
                                  : scratch[threadIdx.x] + other;
    }
    __syncthreads();
  }
  const C r = scratch[0];
  __syncthreads();  // scratch is reused by the next reduction
  return r;
}

template <typename T>
__global__ void softmax_kernel(const T* x, const T* mask, T* y, std::int64_t rows, std::int64_t n,
                               std::int64_t inner, std::int64_t mask_rows, bool take_log,
                               T* lse_out) {
  using C = acc_t<T>;
  __shared__ C scratch[kRowThreads];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t o = r / inner, i = r % inner, base = o * n * inner + i;
    const T* m = mask ? mask + (r % mask_rows) * n : nullptr;
    auto value = [&](std::int64_t k) {
      C v = load(x + base + k * inner);
      if (m) v += load(m + k);
      return v;
    };
    C mx = C(-INFINITY);
    for (std::int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      const C v = value(k);
      mx = v > mx || v != v ? v : mx;
    }
    mx = block_all<true>(mx, scratch);
    if (isinf(mx) && mx < 0) mx = 0;  // a row of -inf: finite exps, NaN result (as the CPU)
    C sum = 0;
    for (std::int64_t k = threadIdx.x; k < n; k += blockDim.x) sum += exp(value(k) - mx);
    sum = block_all<false>(sum, scratch);
    const C lse = log(sum) + mx, inv = C(1) / sum;
    if (lse_out && threadIdx.x == 0) store(lse_out + r, lse);
    for (std::int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      const C v = value(k);
      store(y + base + k * inner, take_log ? v - lse : exp(v - mx) * inv);
    }
  }
}

template <typename T>
__global__ void softmax_backward_kernel(const T* y, const T* g, T* dx, std::int64_t rows,
                                        std::int64_t n, std::int64_t inner, bool take_log) {
  using C = acc_t<T>;
  __shared__ C scratch[kRowThreads];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t o = r / inner, i = r % inner, base = o * n * inner + i;
    C s = 0;
    for (std::int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      const std::int64_t e = base + k * inner;
      s += take_log ? load(g + e) : load(g + e) * load(y + e);
    }
    s = block_all<false>(s, scratch);
    for (std::int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      const std::int64_t e = base + k * inner;
      const C gy = load(g + e), yy = load(y + e);
      store(dx + e, take_log ? gy - exp(yy) * s : yy * (gy - s));
    }
  }
}

unsigned blocks_for(std::int64_t rows) {
  return static_cast<unsigned>(rows < kMaxBlocks ? rows : kMaxBlocks);
}

}  // namespace

template <typename T>
void softmax_rows(const T* x, const T* mask, T* y, std::int64_t outer, std::int64_t n,
                  std::int64_t inner, std::int64_t mask_rows, bool log, cudaStream_t stream,
                  T* lse) {
  const std::int64_t rows = outer * inner;
  if (rows == 0 || n == 0) return;
  softmax_kernel<T><<<blocks_for(rows), kRowThreads, 0, stream>>>(
      x, mask, y, rows, n, inner, mask_rows > 0 ? mask_rows : 1, log, lse);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void softmax_rows_backward(const T* y, const T* g, T* dx, std::int64_t outer, std::int64_t n,
                           std::int64_t inner, bool log, cudaStream_t stream) {
  const std::int64_t rows = outer * inner;
  if (rows == 0 || n == 0) return;
  softmax_backward_kernel<T>
      <<<blocks_for(rows), kRowThreads, 0, stream>>>(y, g, dx, rows, n, inner, log);
  FSDP_CUDA_CHECK_LAUNCH();
}

#define FSDP_SOFTMAX(T)                                                                           \
  template void softmax_rows<T>(const T*, const T*, T*, std::int64_t, std::int64_t, std::int64_t, \
                                std::int64_t, bool, cudaStream_t, T*);                            \
  template void softmax_rows_backward<T>(const T*, const T*, T*, std::int64_t, std::int64_t,      \
                                         std::int64_t, bool, cudaStream_t);
FSDP_SOFTMAX(float)
FSDP_SOFTMAX(bf16)
FSDP_SOFTMAX(fp16)
FSDP_SOFTMAX(double)
#undef FSDP_SOFTMAX

}  // namespace fsdp::cuda
