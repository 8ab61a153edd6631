// max along one dim (torch.max(x, dim)) and its backward, on a contiguous input read as (outer,
// n, inner): one thread per output walks its n values; NaN wins (propagated, its first position)
// and ties keep the first index, as the CPU. The backward scatters each gradient to its maximum's
// position in a zero-filled contiguous gradient.
#include "core/cuda/cuda_check.h"
#include "core/cuda/kernel_math.cuh"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.h"

namespace fsdp::cuda {
namespace {

template <typename C>
__device__ __forceinline__ bool greater_or_nan(C x, C best) {
  return x > best || (x != x && best == best);
}

template <typename T>
__global__ void max_dim_kernel(const T* a, T* values, std::int64_t* indices, std::int64_t outer,
                               std::int64_t n, std::int64_t inner) {
  for (std::int64_t t = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; t < outer * inner;
       t += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t o = t / inner, i = t % inner;
    const T* col = a + o * n * inner + i;
    acc_t<T> best = load(col);
    std::int64_t at = 0;
    for (std::int64_t k = 1; k < n; ++k) {
      const acc_t<T> x = load(col + k * inner);
      if (greater_or_nan(x, best)) {
        best = x;
        at = k;
      }
    }
    store(values + t, best);
    indices[t] = at;
  }
}

template <typename T>
__global__ void max_dim_backward_kernel(T* grad, const T* g, const std::int64_t* indices,
                                        std::int64_t outer, std::int64_t n, std::int64_t inner) {
  for (std::int64_t t = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; t < outer * inner;
       t += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t o = t / inner, i = t % inner, at = indices[t];
    if (at >= 0 && at < n) grad[(o * n + at) * inner + i] = g[t];
  }
}

}  // namespace

template <typename T>
void max_dim(const T* a, T* values, std::int64_t* indices, std::int64_t outer, std::int64_t n,
             std::int64_t inner, cudaStream_t stream) {
  if (outer * inner == 0) return;
  max_dim_kernel<<<grid_for(outer * inner), kThreads, 0, stream>>>(a, values, indices, outer, n,
                                                                   inner);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void max_dim_backward(T* grad, const T* g, const std::int64_t* indices, std::int64_t outer,
                      std::int64_t n, std::int64_t inner, cudaStream_t stream) {
  if (outer * inner == 0) return;
  max_dim_backward_kernel<<<grid_for(outer * inner), kThreads, 0, stream>>>(grad, g, indices, outer,
                                                                            n, inner);
  FSDP_CUDA_CHECK_LAUNCH();
}

#define FSDP_INSTANTIATE(T)                                                                        \
  template void max_dim<T>(const T*, T*, std::int64_t*, std::int64_t, std::int64_t, std::int64_t,  \
                           cudaStream_t);                                                          \
  template void max_dim_backward<T>(T*, const T*, const std::int64_t*, std::int64_t, std::int64_t, \
                                    std::int64_t, cudaStream_t);
FSDP_INSTANTIATE(float)
FSDP_INSTANTIATE(bf16)
FSDP_INSTANTIATE(fp16)
FSDP_INSTANTIATE(double)

}  // namespace fsdp::cuda
