// Softmax and log-softmax along any dim of a contiguous tensor read as (outer, n, inner), and
// their backward: one block per row (an (outer, inner) pair), its threads striding over the n
// elements `inner` apart (a softmax along the last dim, inner == 1: 16-byte packs of the
// contiguous row, vec_access.cuh); max and sums by a shared-memory tree. Accumulation in float
// (double for double storage). A row of -inf gives NaN, as torch's and the CPU's.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernel_math.cuh"
#include "core/cuda/kernels.h"
#include "core/cuda/vec_access.cuh"

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

// f(k, x[k]) over this thread's elements of a row `stride` apart: a contiguous row (stride 1) in
// 16-byte packs between a scalar head and tail.
template <typename T, typename F>
__device__ __forceinline__ void each_in_row(const T* row, std::int64_t n, std::int64_t stride,
                                            F f) {
  if (stride == 1)
    for_each_in_row(row, n, threadIdx.x, blockDim.x, f);
  else
    for (std::int64_t k = threadIdx.x; k < n; k += blockDim.x) f(k, load(row + k * stride));
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
    // Each value with its mask's; the maskless rows of a last-dim softmax in packs.
    const auto each = [&](auto f) {
      if (m)
        for (std::int64_t k = threadIdx.x; k < n; k += blockDim.x)
          f(k, load(x + base + k * inner) + load(m + k));
      else
        each_in_row(x + base, n, inner, f);
    };
    C mx = C(-INFINITY);
    each([&](std::int64_t, C v) { mx = v > mx || v != v ? v : mx; });
    mx = block_all<true>(mx, scratch);
    if (isinf(mx) && mx < 0) mx = 0;  // a row of -inf: finite exps, NaN result (as the CPU)
    C sum = 0;
    each([&](std::int64_t, C v) { sum += exp(v - mx); });
    sum = block_all<false>(sum, scratch);
    const C lse = log(sum) + mx, inv = C(1) / sum;
    if (lse_out && threadIdx.x == 0) store(lse_out + r, lse);
    const auto out = [&](std::int64_t, C v) { return take_log ? v - lse : exp(v - mx) * inv; };
    if (!m && inner == 1)
      map_row(x + base, y + base, n, threadIdx.x, blockDim.x, out);
    else
      each([&](std::int64_t k, C v) { store(y + base + k * inner, out(k, v)); });
  }
}

template <typename T>
__global__ void softmax_backward_kernel(const T* y, const T* g, T* dx, std::int64_t rows,
                                        std::int64_t n, std::int64_t inner, bool take_log) {
  using C = acc_t<T>;
  __shared__ C scratch[kRowThreads];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t o = r / inner, i = r % inner, base = o * n * inner + i;
    constexpr int V = Pack<T>::kSize;
    const T *yr = y + base, *gr = g + base;
    T* dr = dx + base;
    // y, g and dx of a contiguous row (inner == 1) in packs where the three share their
    // alignment; otherwise (and for the ends) element by element, `inner` apart.
    const RowSplit split = inner == 1 ? row_split(n, yr, gr, dr) : RowSplit{n, 0};
    C s = 0;
    const auto sum = [&](C yy, C gy) { s += take_log ? gy : gy * yy; };
    visit_row<T>(
        n, split, threadIdx.x, blockDim.x,
        [&](std::int64_t k) { sum(load(yr + k * inner), load(gr + k * inner)); },
        [&](std::int64_t k0) {
          C py[V], pg[V];
          load_widened<V>(yr + k0, py);
          load_widened<V>(gr + k0, pg);
#pragma unroll
          for (int j = 0; j < V; ++j) sum(py[j], pg[j]);
        });
    s = block_all<false>(s, scratch);
    const auto grad = [&](C yy, C gy) { return take_log ? gy - exp(yy) * s : yy * (gy - s); };
    visit_row<T>(
        n, split, threadIdx.x, blockDim.x,
        [&](std::int64_t k) {
          store(dr + k * inner, grad(load(yr + k * inner), load(gr + k * inner)));
        },
        [&](std::int64_t k0) {
          C py[V], pg[V];
          load_widened<V>(yr + k0, py);
          load_widened<V>(gr + k0, pg);
#pragma unroll
          for (int j = 0; j < V; ++j) py[j] = grad(py[j], pg[j]);
          store_narrowed<V>(dr + k0, py);
        });
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
