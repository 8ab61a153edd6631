// AdamW and SGD over flat fp32 shards (FSDP's flat parameters): one elementwise pass over the
// parameter, its gradient and its state, in torch's order of operations (torch.optim.AdamW with
// foreach=False; SGD likewise). Bias corrections are computed once on the host in double.
#include <cmath>

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernels.h"

namespace fsdp::cuda {
namespace {

// The step's constants, computed once on the host in double and rounded to float, exactly as
// the CPU update (core/optim/update_kernels.cpp, AdamConsts) does: the two then agree to float
// rounding (1 - beta2 in float arithmetic alone is 1.3e-5 off for beta2 = 0.999).
struct AdamWConsts {
  float b1, b2, one_b1, one_b2, eps, decay, neg_step_size, bc2_sqrt;
};

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, std::int64_t n,
                             AdamWConsts c) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const float grad = g[i];
    const float param = p[i] * c.decay;  // decoupled weight decay first, as torch
    const float mi = m[i] * c.b1 + c.one_b1 * grad;
    const float vi = v[i] * c.b2 + c.one_b2 * grad * grad;
    const float denom = sqrtf(vi) / c.bc2_sqrt + c.eps;
    p[i] = param + c.neg_step_size * mi / denom;
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
  const double bc1 = 1.0 - std::pow(a.beta1, double(a.step));
  const double bc2 = 1.0 - std::pow(a.beta2, double(a.step));
  const AdamWConsts c{float(a.beta1),       float(a.beta2),
                      float(1.0 - a.beta1), float(1.0 - a.beta2),
                      float(a.eps),         float(1.0 - a.lr * a.weight_decay),
                      float(-(a.lr / bc1)), float(std::sqrt(bc2))};
  adamw_kernel<<<grid_for(n), kThreads, 0, stream>>>(param, grad, exp_avg, exp_avg_sq, n, c);
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
