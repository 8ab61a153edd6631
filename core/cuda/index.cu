// Rows selected by index along one dim (index_select, embedding's forward) and their gradient
// scattered back with atomics (index_add, embedding's backward): one thread per element of the
// (outer, n, inner) side, in a grid-stride loop (selected rows of whole aligned 16-byte packs: one
// thread per pack). Each thread checks the index it reads (index_fault.cuh): a bad one is
// recorded and its element skipped, never read out of bounds.
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/index_fault.cuh"
#include "core/cuda/kernels.h"
#include "core/cuda/vec_access.cuh"

namespace fsdp::cuda {
namespace {

#define FSDP_GRID_STRIDE(i, n)                                                        \
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < (n); \
       i += std::int64_t(gridDim.x) * blockDim.x)

template <typename U, typename I>
__global__ void index_select_kernel(const U* src, const I* index, U* out, std::int64_t n,
                                    std::int64_t inner, IndexBounds b, IndexFault* fault,
                                    std::int64_t total) {
  FSDP_GRID_STRIDE(e, total) {
    const std::int64_t k = e % inner, row = e / inner, i = row % n, o = row / n;
    const std::int64_t r = checked_row(index, i, b, fault);
    if (r >= 0) out[e] = src[(o * b.size + r) * inner + k];
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

template <typename T, typename I>
__global__ void index_add_kernel(const T* src, const I* index, T* grad, std::int64_t n,
                                 std::int64_t inner, IndexBounds b, IndexFault* fault,
                                 std::int64_t total) {
  FSDP_GRID_STRIDE(e, total) {
    const std::int64_t k = e % inner, row = e / inner, i = row % n, o = row / n;
    const std::int64_t r = checked_row(index, i, b, fault);
    if (r >= 0) add_to(grad + (o * b.size + r) * inner + k, src[e]);
  }
}

}  // namespace

template <typename U, typename I>
void index_select_rows(const U* src, const I* index, U* out, std::int64_t outer, std::int64_t n,
                       std::int64_t inner, const IndexBounds& b, IndexFault* fault,
                       cudaStream_t stream) {
  const std::int64_t total = outer * n * inner;
  if (total == 0) return;
  if (inner * sizeof(U) % 16 == 0 && all_aligned16(src, out)) {
    // Rows of whole 16-byte packs (embedding rows of 768 bf16: 96): a pack a thread.
    using Bits = unsigned __int128;  // one 16-byte access (vec_access.cuh's store_pack)
    const std::int64_t packs = inner * std::int64_t(sizeof(U)) / 16;
    index_select_kernel<Bits, I><<<grid_for(total / inner * packs), kThreads, 0, stream>>>(
        reinterpret_cast<const Bits*>(src), index, reinterpret_cast<Bits*>(out), n, packs, b, fault,
        total / inner * packs);
  } else {
    index_select_kernel<U, I>
        <<<grid_for(total), kThreads, 0, stream>>>(src, index, out, n, inner, b, fault, total);
  }
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T, typename I>
void index_add_rows(const T* src, const I* index, T* grad, std::int64_t outer, std::int64_t n,
                    std::int64_t inner, const IndexBounds& b, IndexFault* fault,
                    cudaStream_t stream) {
  const std::int64_t total = outer * n * inner;
  if (total == 0) return;
  index_add_kernel<T, I>
      <<<grid_for(total), kThreads, 0, stream>>>(src, index, grad, n, inner, b, fault, total);
  FSDP_CUDA_CHECK_LAUNCH();
}

#define FSDP_SELECT(U, I)                                                                   \
  template void index_select_rows<U, I>(const U*, const I*, U*, std::int64_t, std::int64_t, \
                                        std::int64_t, const IndexBounds&, IndexFault*,      \
                                        cudaStream_t);
#define FSDP_SELECT_BOTH(U) FSDP_SELECT(U, std::int64_t) FSDP_SELECT(U, std::int32_t)
FSDP_SELECT_BOTH(std::uint8_t)
FSDP_SELECT_BOTH(std::uint16_t)
FSDP_SELECT_BOTH(std::uint32_t)
FSDP_SELECT_BOTH(std::uint64_t)
#undef FSDP_SELECT_BOTH
#undef FSDP_SELECT
#define FSDP_ADD(T, I)                                                                   \
  template void index_add_rows<T, I>(const T*, const I*, T*, std::int64_t, std::int64_t, \
                                     std::int64_t, const IndexBounds&, IndexFault*, cudaStream_t);
#define FSDP_ADD_BOTH(T) FSDP_ADD(T, std::int64_t) FSDP_ADD(T, std::int32_t)
FSDP_ADD_BOTH(float)
FSDP_ADD_BOTH(bf16)
FSDP_ADD_BOTH(fp16)
FSDP_ADD_BOTH(double)
#undef FSDP_ADD_BOTH
#undef FSDP_ADD

}  // namespace fsdp::cuda
