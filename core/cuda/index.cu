// Rows selected by index along one dim (index_select, embedding's forward) and their gradient
// scattered back with atomics (index_add, embedding's backward): one thread per element of the
// (outer, n, inner) side, in a grid-stride loop.
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernels.h"

namespace fsdp::cuda {
namespace {

#define FSDP_GRID_STRIDE(i, n)                                                        \
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < (n); \
       i += std::int64_t(gridDim.x) * blockDim.x)

template <typename U>
__global__ void index_select_kernel(const U* src, const std::int64_t* index, U* out, std::int64_t n,
                                    std::int64_t inner, std::int64_t size, std::int64_t total) {
  FSDP_GRID_STRIDE(e, total) {
    const std::int64_t k = e % inner, row = e / inner, i = row % n, o = row / n;
    out[e] = src[(o * size + index[i]) * inner + k];
  }
}

__device__ __forceinline__ void add_to(float* p, float v) {
  atomicAdd(p, v);
}
__device__ __forceinline__ void add_to(double* p, double v) {
  atomicAdd(p, v);
}
__device__ __forceinline__ void add_to(bf16* p, bf16 v) {
  atomicAdd(p, v);  // sm_80 and later
}
__device__ __forceinline__ void add_to(fp16* p, fp16 v) {
  atomicAdd(p, v);  // sm_70 and later
}

template <typename T>
__global__ void index_add_kernel(const T* src, const std::int64_t* index, T* grad, std::int64_t n,
                                 std::int64_t inner, std::int64_t size, std::int64_t total) {
  FSDP_GRID_STRIDE(e, total) {
    const std::int64_t k = e % inner, row = e / inner, i = row % n, o = row / n;
    add_to(grad + (o * size + index[i]) * inner + k, src[e]);
  }
}

}  // namespace

template <typename U>
void index_select_rows(const U* src, const std::int64_t* index, U* out, std::int64_t outer,
                       std::int64_t n, std::int64_t inner, std::int64_t size, cudaStream_t stream) {
  const std::int64_t total = outer * n * inner;
  if (total == 0) return;
  index_select_kernel<U>
      <<<grid_for(total), kThreads, 0, stream>>>(src, index, out, n, inner, size, total);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void index_add_rows(const T* src, const std::int64_t* index, T* grad, std::int64_t outer,
                    std::int64_t n, std::int64_t inner, std::int64_t size, cudaStream_t stream) {
  const std::int64_t total = outer * n * inner;
  if (total == 0) return;
  index_add_kernel<T>
      <<<grid_for(total), kThreads, 0, stream>>>(src, index, grad, n, inner, size, total);
  FSDP_CUDA_CHECK_LAUNCH();
}

#define FSDP_SELECT(U)                                                                \
  template void index_select_rows<U>(const U*, const std::int64_t*, U*, std::int64_t, \
                                     std::int64_t, std::int64_t, std::int64_t, cudaStream_t);
FSDP_SELECT(std::uint8_t)
FSDP_SELECT(std::uint16_t)
FSDP_SELECT(std::uint32_t)
FSDP_SELECT(std::uint64_t)
#undef FSDP_SELECT
#define FSDP_ADD(T)                                                                              \
  template void index_add_rows<T>(const T*, const std::int64_t*, T*, std::int64_t, std::int64_t, \
                                  std::int64_t, std::int64_t, cudaStream_t);
FSDP_ADD(float)
FSDP_ADD(bf16)
FSDP_ADD(fp16)
FSDP_ADD(double)
#undef FSDP_ADD

}  // namespace fsdp::cuda
