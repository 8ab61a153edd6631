// Embedding lookup and its gradient. Backward scatters with float atomics: GPT batches repeat
// tokens, and atomics handle repeats without sorting the indices first (llm.c sorts to make it
// deterministic; that is the faster and reproducible next step if the bench shows atomics hot).
// An index outside [0, vocab) cannot throw on the device: forward writes NaN there (a poisoned
// output, never another row's data) and backward skips it; the op layer's host check reports it.
#include <cmath>

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernel_math.cuh"
#include "core/cuda/kernels.h"

namespace fsdp::cuda {
namespace {

template <typename T>
__global__ void embedding_forward_kernel(const T* weight, const std::int32_t* index, T* out,
                                         std::int64_t n, std::int64_t dim, std::int64_t vocab) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n * dim;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t tok = index[i / dim];
    out[i] = tok >= 0 && tok < vocab ? weight[tok * dim + i % dim] : from_float<T>(NAN);
  }
}

template <typename T>
__global__ void embedding_backward_kernel(const T* dout, const std::int32_t* index, float* dweight,
                                          std::int64_t n, std::int64_t dim, std::int64_t vocab) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n * dim;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t tok = index[i / dim];
    if (tok >= 0 && tok < vocab) atomicAdd(&dweight[tok * dim + i % dim], to_float(dout[i]));
  }
}

}  // namespace

template <typename T>
void embedding_forward(const T* weight, std::int64_t vocab, const std::int32_t* index, T* out,
                       std::int64_t n, std::int64_t dim, cudaStream_t stream) {
  if (n == 0 || dim == 0) return;
  embedding_forward_kernel<<<grid_for(n * dim), kThreads, 0, stream>>>(weight, index, out, n, dim,
                                                                       vocab);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void embedding_backward(const T* dout, const std::int32_t* index, float* dweight,
                        std::int64_t vocab, std::int64_t n, std::int64_t dim, cudaStream_t stream) {
  if (n == 0 || dim == 0) return;
  embedding_backward_kernel<<<grid_for(n * dim), kThreads, 0, stream>>>(dout, index, dweight, n,
                                                                        dim, vocab);
  FSDP_CUDA_CHECK_LAUNCH();
}

#define FSDP_INSTANTIATE(T)                                                                \
  template void embedding_forward<T>(const T*, std::int64_t, const std::int32_t*, T*,      \
                                     std::int64_t, std::int64_t, cudaStream_t);            \
  template void embedding_backward<T>(const T*, const std::int32_t*, float*, std::int64_t, \
                                      std::int64_t, std::int64_t, cudaStream_t);
FSDP_INSTANTIATE(float)
FSDP_INSTANTIATE(bf16)

}  // namespace fsdp::cuda
