// Fused cross-entropy (llm.c's fused classifier): one block per row reads the logits twice, once
// for the log-sum-exp with an online max (each thread rescales its running sum when its max
// grows, so one pass finds both) and once to write dlogits; the (n, vocab) probabilities are
// never stored. Each thread reads the target logit before the first block reduction, whose
// barriers order that read before any thread overwrites it when dlogits aliases the logits. Rows
// are read and written in 16-byte packs (vec_access.cuh) between a scalar head and tail.
#include <cmath>

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernel_math.cuh"
#include "core/cuda/kernels.h"
#include "core/cuda/vec_access.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreadsPerRow = 512;

template <typename T>
__global__ void cross_entropy_kernel(const T* logits, const std::int32_t* target, float* losses,
                                     T* dlogits, std::int64_t vocab, std::int32_t ignore_index,
                                     float dloss_scale) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const T* x = logits + row * vocab;
  T* d = dlogits + row * vocab;
  const std::int32_t tgt = target[row];
  if (tgt == ignore_index) {  // the whole block takes this branch: no barrier is split
    Pack<T> zeros;
    for (T& z : zeros.v) z = from_float<T>(0.0f);
    visit_row<T>(
        vocab, row_split(vocab, d), threadIdx.x, blockDim.x,
        [&](std::int64_t j) { d[j] = zeros.v[0]; },
        [&](std::int64_t j) { store_pack(d + j, zeros); });
    if (threadIdx.x == 0) losses[row] = 0.0f;
    return;
  }
  const bool valid = tgt >= 0 && tgt < vocab;
  const float x_target = valid ? to_float(x[tgt]) : NAN;
  float m = -INFINITY, s = 0.0f;
  for_each_in_row(x, vocab, threadIdx.x, blockDim.x, [&](std::int64_t, float v) {
    if (v > m) {
      s = s * expf(m - v) + 1.0f;
      m = v;
    } else {
      s += expf(v - m);
    }
  });
  const float row_max = block_max(m, scratch);
  s = m == -INFINITY ? 0.0f : s * expf(m - row_max);  // a thread with no columns adds nothing
  const float lse = row_max + logf(block_sum(s, scratch));
  if (threadIdx.x == 0) losses[row] = valid ? lse - x_target : NAN;
  map_row(x, d, vocab, threadIdx.x, blockDim.x, [&](std::int64_t j, float v) {
    return dloss_scale * (expf(v - lse) - (j == tgt ? 1.0f : 0.0f));
  });
}

}  // namespace

template <typename T>
void cross_entropy_forward_backward(const T* logits, const std::int32_t* target, float* losses,
                                    T* dlogits, std::int64_t n, std::int64_t vocab,
                                    std::int32_t ignore_index, float dloss_scale,
                                    cudaStream_t stream) {
  if (n == 0) return;
  cross_entropy_kernel<<<static_cast<unsigned>(n), kThreadsPerRow, 0, stream>>>(
      logits, target, losses, dlogits, vocab, ignore_index, dloss_scale);
  FSDP_CUDA_CHECK_LAUNCH();
}

#define FSDP_INSTANTIATE(T)                                                                        \
  template void cross_entropy_forward_backward<T>(const T*, const std::int32_t*, float*, T*,       \
                                                  std::int64_t, std::int64_t, std::int32_t, float, \
                                                  cudaStream_t);
FSDP_INSTANTIATE(float)
FSDP_INSTANTIATE(bf16)
FSDP_INSTANTIATE(fp16)

}  // namespace fsdp::cuda
