// Fused cross-entropy (llm.c's fused classifier): one block per row reads the logits twice, once
// for the log-sum-exp with an online max (each thread rescales its running sum when its max
// grows, so one pass finds both) and once to write dlogits; the (n, vocab) probabilities are
// never stored. Each thread reads the target logit before the first block reduction, whose
// barriers order that read before any thread overwrites it when dlogits aliases the logits.
#include <cmath>

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernel_math.cuh"
#include "core/cuda/kernels.h"

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
    for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) d[j] = from_float<T>(0.0f);
    if (threadIdx.x == 0) losses[row] = 0.0f;
    return;
  }
  const bool valid = tgt >= 0 && tgt < vocab;
  const float x_target = valid ? to_float(x[tgt]) : NAN;
  float m = -INFINITY, s = 0.0f;
  for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float v = to_float(x[j]);
    if (v > m) {
      s = s * expf(m - v) + 1.0f;
      m = v;
    } else {
      s += expf(v - m);
    }
  }
  const float row_max = block_max(m, scratch);
  s = m == -INFINITY ? 0.0f : s * expf(m - row_max);  // a thread with no columns adds nothing
  const float lse = row_max + logf(block_sum(s, scratch));
  if (threadIdx.x == 0) losses[row] = valid ? lse - x_target : NAN;
  for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float p = expf(to_float(x[j]) - lse);
    d[j] = from_float<T>(dloss_scale * (p - (j == tgt ? 1.0f : 0.0f)));
  }
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
