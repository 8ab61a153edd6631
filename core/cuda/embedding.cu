// Embedding lookup and its gradient. Backward scatters with float atomics: GPT batches repeat
// tokens, and atomics handle repeats without sorting the indices first (llm.c sorts to make it
// deterministic; that is the faster and reproducible next step if the bench shows atomics hot).
// An index outside [0, vocab) cannot throw on the device: forward writes NaN there (a poisoned
// output, never another row's data) and backward skips it; the op layer's host check reports it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

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

// Rows whose bytes are a multiple of 16 (GPT-2's 768): one warp per row in 16-byte vectors, the
// index read once per row, no per-element division (the flat kernel's cost).
template <typename T>
__global__ void embedding_forward_rows_kernel(const T* __restrict__ weight,
                                              const std::int32_t* __restrict__ index,
                                              T* __restrict__ out, std::int64_t n,
                                              std::int64_t vecs, std::int64_t vocab) {
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = std::int64_t(gridDim.x) * (blockDim.x >> 5);
  for (std::int64_t row = blockIdx.x * std::int64_t(blockDim.x >> 5) + (threadIdx.x >> 5); row < n;
       row += warps) {
    const std::int64_t tok = index[row];
    uint4* dst = reinterpret_cast<uint4*>(out) + row * vecs;
    if (tok >= 0 && tok < vocab) {
      const uint4* src = reinterpret_cast<const uint4*>(weight) + tok * vecs;
#pragma unroll 4  // GPT-2's 96 vectors a row: 3 loads a lane in flight
      for (std::int64_t c = lane; c < vecs; c += 32) dst[c] = src[c];
    } else {
      // The quiet NaN's bits in every lane of the vector (no writing a uint4 through T*).
      const unsigned w = std::is_same_v<T, float>  ? 0x7fc00000u
                         : std::is_same_v<T, bf16> ? 0x7fc07fc0u
                                                   : 0x7e007e00u;  // fp16's quiet NaN, twice
      const uint4 nan = make_uint4(w, w, w, w);
      for (std::int64_t c = lane; c < vecs; c += 32) dst[c] = nan;
    }
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
  const bool aligned = reinterpret_cast<std::uintptr_t>(weight) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(out) % 16 == 0;
  if (aligned && dim * sizeof(T) % 16 == 0) {
    constexpr int kWarpsPerBlock = kThreads / 32;
    const std::int64_t blocks =
        std::min<std::int64_t>((n + kWarpsPerBlock - 1) / kWarpsPerBlock, kMaxBlocks);
    embedding_forward_rows_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        weight, index, out, n, dim * std::int64_t(sizeof(T)) / 16, vocab);
    FSDP_CUDA_CHECK_LAUNCH();
    return;
  }
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
FSDP_INSTANTIATE(fp16)

}  // namespace fsdp::cuda
