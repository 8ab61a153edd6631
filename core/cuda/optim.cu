// AdamW and SGD over flat fp32 shards (FSDP's flat parameters): one elementwise pass over the
// parameter, its gradient and its state, in torch's order of operations (torch.optim.AdamW with
// foreach=False; SGD likewise). Bias corrections are computed once on the host in double.
#include <cmath>

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernels.h"

namespace fsdp::cuda {
namespace {

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, std::int64_t n, float lr,
                             float beta1, float beta2, float eps, float decay, float step_size,
                             float bias_correction2_sqrt) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const float grad = g[i];
    float param = p[i] * (1.0f - lr * decay);  // decoupled weight decay first, as torch
    const float mi = m[i] + (1.0f - beta1) * (grad - m[i]);  // exp_avg.lerp_(grad, 1 - beta1)
    const float vi = beta2 * v[i] + (1.0f - beta2) * grad * grad;
    const float denom = sqrtf(vi) / bias_correction2_sqrt + eps;
    p[i] = param - step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
  }
}

__global__ void sgd_kernel(float* p, const float* g, float* buf, std::int64_t n, float lr,
                           float momentum, float dampening, float decay, bool nesterov,
                           bool first_step) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    float d = g[i] + decay * p[i];
    if (momentum != 0.0f) {
      const float b = first_step ? d : momentum * buf[i] + (1.0f - dampening) * d;
      buf[i] = b;
      d = nesterov ? d + momentum * b : b;
    }
    p[i] -= lr * d;
  }
}

}  // namespace

void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::int64_t n,
                const AdamWArgs& a, cudaStream_t stream) {
  if (n == 0) return;
  const double bc1 = 1.0 - std::pow(double(a.beta1), double(a.step));
  const double bc2 = 1.0 - std::pow(double(a.beta2), double(a.step));
  adamw_kernel<<<grid_for(n), kThreads, 0, stream>>>(
      param, grad, exp_avg, exp_avg_sq, n, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay,
      static_cast<float>(a.lr / bc1), static_cast<float>(std::sqrt(bc2)));
  FSDP_CUDA_CHECK_LAUNCH();
}

void sgd_step(float* param, const float* grad, float* momentum_buffer, std::int64_t n,
              const SgdArgs& a, cudaStream_t stream) {
  if (n == 0) return;
  sgd_kernel<<<grid_for(n), kThreads, 0, stream>>>(param, grad, momentum_buffer, n, a.lr,
                                                   a.momentum, a.dampening, a.weight_decay,
                                                   a.nesterov, a.first_step);
  FSDP_CUDA_CHECK_LAUNCH();
}

}  // namespace fsdp::cuda
