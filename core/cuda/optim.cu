// AdamW and SGD over flat fp32 shards (FSDP's flat parameters): one elementwise pass over the
// parameter, its gradient and its state, in torch's order of operations (torch.optim.AdamW with
// foreach=False; SGD likewise). Bias corrections are computed once on the host in double. Each
// thread moves 16 bytes (4 floats) of every array per access where the arrays share their
// alignment (vec_access.cuh), the ends and a misaligned shard element by element.
#include <cmath>

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernels.h"
#include "core/cuda/vec_access.cuh"

namespace fsdp::cuda {
namespace {

// The step's constants, computed once on the host in double and rounded to float, exactly as
// the CPU update (core/optim/update_kernels.cpp, AdamConsts) does: the two then agree to float
// rounding (1 - beta2 in float arithmetic alone is 1.3e-5 off for beta2 = 0.999).
struct AdamWConsts {
  float b1, b2, one_b1, one_b2, eps, decay, neg_step_size, bc2_sqrt;
};

__device__ __forceinline__ void adamw_one(float& p, float g, float& m, float& v,
                                          const AdamWConsts& c) {
  const float param = p * c.decay;  // decoupled weight decay first, as torch
  m = m * c.b1 + c.one_b1 * g;
  v = v * c.b2 + c.one_b2 * g * g;
  const float denom = sqrtf(v) / c.bc2_sqrt + c.eps;
  p = param + c.neg_step_size * m / denom;
}

__device__ __forceinline__ void sgd_one(float& p, float g, float& buf, const SgdArgs& c) {
  float d = g + c.weight_decay * p;
  if (c.momentum != 0.0f) {
    buf = c.first_step ? d : c.momentum * buf + (1.0f - c.dampening) * d;
    d = c.nesterov ? d + c.momentum * buf : buf;
  }
  p -= c.lr * d;
}

// The shard as one row over every thread of the grid (vec_access.cuh): 4 floats of each array
// per 16-byte access where the arrays share their alignment, the ends scalar.
__device__ __forceinline__ std::int64_t grid_lane() {
  return blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
}
__device__ __forceinline__ std::int64_t grid_lanes() {
  return std::int64_t(gridDim.x) * blockDim.x;
}

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, std::int64_t n,
                             AdamWConsts c) {
  visit_row<float>(
      n, row_split(n, p, g, m, v), grid_lane(), grid_lanes(),
      [&](std::int64_t i) { adamw_one(p[i], g[i], m[i], v[i], c); },
      [&](std::int64_t i) {
        Pack<float> pp = load_pack(p + i), pm = load_pack(m + i), pv = load_pack(v + i);
        const Pack<float> pg = load_pack(g + i);
#pragma unroll
        for (int j = 0; j < Pack<float>::kSize; ++j)
          adamw_one(pp.v[j], pg.v[j], pm.v[j], pv.v[j], c);
        store_pack(p + i, pp);
        store_pack(m + i, pm);
        store_pack(v + i, pv);
      });
}

// Without momentum the buffer is neither read nor written (it may be null).
__global__ void sgd_kernel(float* p, const float* g, float* buf, std::int64_t n, SgdArgs c) {
  const bool momentum = c.momentum != 0.0f;
  visit_row<float>(
      n, momentum ? row_split(n, p, g, buf) : row_split(n, p, g), grid_lane(), grid_lanes(),
      [&](std::int64_t i) {
        float b = 0.0f;
        if (momentum && !c.first_step) b = buf[i];
        sgd_one(p[i], g[i], b, c);
        if (momentum) buf[i] = b;
      },
      [&](std::int64_t i) {
        Pack<float> pp = load_pack(p + i), pb{};
        const Pack<float> pg = load_pack(g + i);
        if (momentum && !c.first_step) pb = load_pack(buf + i);
#pragma unroll
        for (int j = 0; j < Pack<float>::kSize; ++j) sgd_one(pp.v[j], pg.v[j], pb.v[j], c);
        store_pack(p + i, pp);
        if (momentum) store_pack(buf + i, pb);
      });
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
  adamw_kernel<<<grid_for(n / Pack<float>::kSize + 1), kThreads, 0, stream>>>(param, grad, exp_avg,
                                                                              exp_avg_sq, n, c);
  FSDP_CUDA_CHECK_LAUNCH();
}

void sgd_step(float* param, const float* grad, float* momentum_buffer, std::int64_t n,
              const SgdArgs& a, cudaStream_t stream) {
  if (n == 0) return;
  sgd_kernel<<<grid_for(n / Pack<float>::kSize + 1), kThreads, 0, stream>>>(param, grad,
                                                                            momentum_buffer, n, a);
  FSDP_CUDA_CHECK_LAUNCH();
}

}  // namespace fsdp::cuda
