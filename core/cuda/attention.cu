// Causal attention with the online softmax (flash-style: the (t, t) scores are never stored),
// in its plainest form: one warp per query row, each lane holding hd/32 of the head dims in
// registers. For each key j <= i the warp forms s = q.k_j with one shuffle reduction, rescales
// its running sum and output when the running maximum grows, and adds p * v_j. Forward saves the
// row's log-sum-exp; backward recomputes p = exp(s - lse) from it, as core's blocked_attention
// does on the CPU (its oracle). Keys and values are re-read from L2 by every row: this is the
// correct baseline to test tiled versions against, not the fast path: the CUDA kernel table sends
// bf16 and fp16 at head dim 64 to the tiled kernels of flash_attention.cu; the rest comes here.
#include <cmath>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernel_math.cuh"
#include "core/cuda/kernels.h"

namespace fsdp::cuda {
namespace {

constexpr int kRowsPerBlock = 8;
constexpr int kPerLane = kMaxAttentionHeadDim / 32;

template <typename T>
__global__ void attention_forward_kernel(const T* q, const T* k, const T* v, T* o, float* lse,
                                         std::int64_t rows, std::int64_t t, int hd, float scale) {
  const std::int64_t row = blockIdx.x * std::int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const std::int64_t i = row % t, base = (row - i) * hd;  // the batch entry's first row
  float qr[kPerLane], acc[kPerLane];
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int d = lane + 32 * r;
    qr[r] = d < hd ? scale * to_float(q[row * hd + d]) : 0.0f;
    acc[r] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (std::int64_t j = 0; j <= i; ++j) {
    const T* kj = k + base + j * hd;
    const T* vj = v + base + j * hd;
    float s = 0.0f;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) {
      const int d = lane + 32 * r;
      if (d < hd) s += qr[r] * to_float(kj[d]);
    }
    s = warp_sum(s);
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new);  // 0 on the first key (m = -inf)
    const float p = expf(s - m_new);
    l = l * correction + p;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) {
      const int d = lane + 32 * r;
      acc[r] = acc[r] * correction + (d < hd ? p * to_float(vj[d]) : 0.0f);
    }
    m = m_new;
  }
  const float inv = 1.0f / l;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int d = lane + 32 * r;
    if (d < hd) o[row * hd + d] = from_float<T>(acc[r] * inv);
  }
  if (lane == 0) lse[row] = m + logf(l);
}

// dS = p * (dO.v_j - D), D = dO.o; dq_i = scale * sum_j dS k_j (in registers); dk_j and dv_j
// gather over every row i >= j, so they are added with float atomics.
template <typename T>
__global__ void attention_backward_kernel(const T* q, const T* k, const T* v, const T* o,
                                          const T* dout, const float* lse, T* dq, float* dk,
                                          float* dv, std::int64_t rows, std::int64_t t, int hd,
                                          float scale) {
  const std::int64_t row = blockIdx.x * std::int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const std::int64_t i = row % t, base = (row - i) * hd;
  float qr[kPerLane], dor[kPerLane], dqr[kPerLane];
  float dsum = 0.0f;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int d = lane + 32 * r;
    qr[r] = d < hd ? scale * to_float(q[row * hd + d]) : 0.0f;
    dor[r] = d < hd ? to_float(dout[row * hd + d]) : 0.0f;
    dsum += d < hd ? dor[r] * to_float(o[row * hd + d]) : 0.0f;
    dqr[r] = 0.0f;
  }
  dsum = warp_sum(dsum);
  const float row_lse = lse[row];
  for (std::int64_t j = 0; j <= i; ++j) {
    const T* kj = k + base + j * hd;
    const T* vj = v + base + j * hd;
    float s = 0.0f, dp = 0.0f;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) {
      const int d = lane + 32 * r;
      if (d < hd) {
        s += qr[r] * to_float(kj[d]);
        dp += dor[r] * to_float(vj[d]);
      }
    }
    s = warp_sum(s);
    dp = warp_sum(dp);
    const float p = expf(s - row_lse);
    const float ds = p * (dp - dsum);
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) {
      const int d = lane + 32 * r;
      if (d < hd) {
        dqr[r] += ds * to_float(kj[d]);
        atomicAdd(&dk[base + j * hd + d], ds * qr[r]);
        atomicAdd(&dv[base + j * hd + d], p * dor[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int d = lane + 32 * r;
    if (d < hd) dq[row * hd + d] = from_float<T>(scale * dqr[r]);
  }
}

unsigned row_blocks(std::int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

void check_head_dim(std::int64_t hd, const char* op) {
  if (hd < 1 || hd > kMaxAttentionHeadDim)
    throw_value_error(op, "head dim must be in [1, 128]", hd);
}

}  // namespace

template <typename T>
void attention_forward(const T* q, const T* k, const T* v, T* o, float* lse, std::int64_t batch,
                       std::int64_t t, std::int64_t hd, float scale, cudaStream_t stream) {
  check_head_dim(hd, "attention_forward");
  if (batch == 0 || t == 0) return;
  attention_forward_kernel<<<row_blocks(batch * t), kRowsPerBlock * 32, 0, stream>>>(
      q, k, v, o, lse, batch * t, t, static_cast<int>(hd), scale);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void attention_backward(const T* q, const T* k, const T* v, const T* o, const T* dout,
                        const float* lse, T* dq, float* dk, float* dv, std::int64_t batch,
                        std::int64_t t, std::int64_t hd, float scale, cudaStream_t stream) {
  check_head_dim(hd, "attention_backward");
  const std::size_t bytes = batch * t * hd * sizeof(float);
  if (bytes == 0) return;
  FSDP_CUDA_CHECK(cudaMemsetAsync(dk, 0, bytes, stream));
  FSDP_CUDA_CHECK(cudaMemsetAsync(dv, 0, bytes, stream));
  attention_backward_kernel<<<row_blocks(batch * t), kRowsPerBlock * 32, 0, stream>>>(
      q, k, v, o, dout, lse, dq, dk, dv, batch * t, t, static_cast<int>(hd), scale);
  FSDP_CUDA_CHECK_LAUNCH();
}

#define FSDP_INSTANTIATE(T)                                                                  \
  template void attention_forward<T>(const T*, const T*, const T*, T*, float*, std::int64_t, \
                                     std::int64_t, std::int64_t, float, cudaStream_t);       \
  template void attention_backward<T>(const T*, const T*, const T*, const T*, const T*,      \
                                      const float*, T*, float*, float*, std::int64_t,        \
                                      std::int64_t, std::int64_t, float, cudaStream_t);
FSDP_INSTANTIATE(float)
FSDP_INSTANTIATE(bf16)
FSDP_INSTANTIATE(fp16)

}  // namespace fsdp::cuda
