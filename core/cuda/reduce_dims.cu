// Reductions over any set of dims of a strided input (the kernel table's sum, mean and amax):
// long reductions one block per output element (grid-stride over outputs), its threads striding
// over that output's reduced elements, then a shared-memory tree; short ones, or more outputs
// than elements each (a bias gradient's column sums, a sum over a small batch), one thread per
// output, neighbouring threads reading neighbouring outputs. Accumulation in float (double for
// double storage).
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernel_math.cuh"
#include "core/cuda/kernels.h"

namespace fsdp::cuda {
namespace {

constexpr int kReduceThreads = 256;

__device__ __forceinline__ std::int64_t offset_of(std::int64_t i, int nd, const std::int64_t* size,
                                                  const std::int64_t* stride) {
  std::int64_t off = 0;
  for (int d = nd - 1; d >= 0; --d) {
    off += (i % size[d]) * stride[d];
    i /= size[d];
  }
  return off;
}

template <typename C, bool kMax>
__device__ __forceinline__ C combine(C a, C b) {
  if constexpr (kMax)
    return a != a || b != b ? C(NAN) : (a > b ? a : b);
  else
    return a + b;
}

template <typename T, bool kMax>
__global__ void reduce_kernel(const T* a, T* out, ReduceLayout l, acc_t<T> scale) {
  using C = acc_t<T>;
  __shared__ C partial[kReduceThreads];
  for (std::int64_t o = blockIdx.x; o < l.outputs; o += gridDim.x) {
    const T* base = a + offset_of(o, l.kept, l.kept_size, l.kept_stride);
    C acc = kMax ? C(-INFINITY) : C(0);
    for (std::int64_t j = threadIdx.x; j < l.count; j += blockDim.x)
      acc = combine<C, kMax>(
          acc, load(base + offset_of(j, l.reduced, l.reduced_size, l.reduced_stride)));
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
      if (threadIdx.x < half)
        partial[threadIdx.x] = combine<C, kMax>(partial[threadIdx.x], partial[threadIdx.x + half]);
      __syncthreads();
    }
    if (threadIdx.x == 0) store(out + o, kMax ? partial[0] : partial[0] * scale);
    __syncthreads();  // partial is reused by the next output
  }
}

template <typename T, bool kMax>
__global__ void reduce_per_thread_kernel(const T* a, T* out, ReduceLayout l, acc_t<T> scale) {
  using C = acc_t<T>;
  for (std::int64_t o = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; o < l.outputs;
       o += std::int64_t(gridDim.x) * blockDim.x) {
    const T* base = a + offset_of(o, l.kept, l.kept_size, l.kept_stride);
    C acc = kMax ? C(-INFINITY) : C(0);
    for (std::int64_t j = 0; j < l.count; ++j)
      acc = combine<C, kMax>(
          acc, load(base + offset_of(j, l.reduced, l.reduced_size, l.reduced_stride)));
    store(out + o, kMax ? acc : acc * scale);
  }
}

// A block's 256 threads pay off only when each output has many elements to share out.
bool per_thread(const ReduceLayout& l) {
  return l.count <= 64 || l.outputs >= l.count;
}

unsigned blocks_for(std::int64_t outputs) {
  return static_cast<unsigned>(outputs < kMaxBlocks ? outputs : kMaxBlocks);
}

}  // namespace

template <typename T>
void reduce_sum(const T* a, T* out, const ReduceLayout& l, double scale, cudaStream_t stream) {
  if (l.outputs == 0) return;
  if (per_thread(l))
    reduce_per_thread_kernel<T, false>
        <<<grid_for(l.outputs), kThreads, 0, stream>>>(a, out, l, static_cast<acc_t<T>>(scale));
  else
    reduce_kernel<T, false><<<blocks_for(l.outputs), kReduceThreads, 0, stream>>>(
        a, out, l, static_cast<acc_t<T>>(scale));
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void reduce_max(const T* a, T* out, const ReduceLayout& l, cudaStream_t stream) {
  if (l.outputs == 0) return;
  if (per_thread(l))
    reduce_per_thread_kernel<T, true><<<grid_for(l.outputs), kThreads, 0, stream>>>(a, out, l, 1);
  else
    reduce_kernel<T, true><<<blocks_for(l.outputs), kReduceThreads, 0, stream>>>(a, out, l, 1);
  FSDP_CUDA_CHECK_LAUNCH();
}

#define FSDP_REDUCE(T)                                                                  \
  template void reduce_sum<T>(const T*, T*, const ReduceLayout&, double, cudaStream_t); \
  template void reduce_max<T>(const T*, T*, const ReduceLayout&, cudaStream_t);
FSDP_REDUCE(float)
FSDP_REDUCE(bf16)
FSDP_REDUCE(fp16)
FSDP_REDUCE(double)
#undef FSDP_REDUCE

}  // namespace fsdp::cuda
