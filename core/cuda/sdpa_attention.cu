// scaled_dot_product_attention's general forms (the Hugging Face models'): grouped-query heads
// (query head h reads kv head h / (H / KV)), any scale, the causal flag, an additive float mask
// with its own strides, q, k and v read through their strides (a (B, S, H, D) projection seen as
// (B, H, S, D)), float or bf16 storage computed in float. attention.cu's plainest form: one warp
// per query row, lanes holding 32-strided head dims in registers, the online softmax over keys,
// the row's log-sum-exp saved; backward recomputes p = exp(s - lse), dq in registers, dk and dv
// added with float atomics (the query heads of a group share their kv head's gradients).
#include <cmath>

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernel_math.cuh"
#include "core/cuda/kernels.h"

namespace fsdp::cuda {
namespace {

constexpr int kRowsPerBlock = 8;
constexpr int kPerLane = kMaxAttentionHeadDim / 32;

// A query row's operands: (b, h, i) from the row's index in (B, H, L) order.
template <typename T>
struct RowOperands {
  const T *q, *k, *v;
  const float* mask;  // the row's mask (keys contiguous), or null
  std::int64_t i, kv_head, b;
};

template <typename T>
__device__ RowOperands<T> row_operands(const T* q, const T* k, const T* v, const float* mask,
                                       const AttentionGeometry& g, std::int64_t row) {
  RowOperands<T> r;
  r.i = row % g.L;
  const std::int64_t h = (row / g.L) % g.H;
  r.b = row / (g.L * g.H);
  r.kv_head = h / (g.H / g.KV);
  r.q = q + r.b * g.q.batch + h * g.q.head + r.i * g.q.row;
  r.k = k + r.b * g.k.batch + r.kv_head * g.k.head;
  r.v = v + r.b * g.v.batch + r.kv_head * g.v.head;
  r.mask = mask ? mask + r.b * g.mask.batch + h * g.mask.head + r.i * g.mask.row : nullptr;
  return r;
}

// scale q.k_j + mask_j over the warp (every lane gets the same value: the xor butterfly adds the
// same pairs in every lane).
template <typename T>
__device__ __forceinline__ float score(const float (&qr)[kPerLane], const T* kj, int lane, int hd,
                                       float scale, const float* mask, std::int64_t j) {
  float s = 0.0f;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int d = lane + 32 * r;
    if (d < hd) s += qr[r] * to_float(kj[d]);
  }
  s = warp_sum(s) * scale;
  return mask ? s + mask[j] : s;
}

template <typename T>
__device__ __forceinline__ void load_row(float (&dst)[kPerLane], const T* src, int lane, int n) {
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int d = lane + 32 * r;
    dst[r] = d < n ? to_float(src[d]) : 0.0f;
  }
}

template <typename T>
__global__ void sdpa_forward_kernel(const T* q, const T* k, const T* v, const float* mask, T* o,
                                    float* lse, AttentionGeometry g) {
  const std::int64_t row = blockIdx.x * std::int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= g.B * g.H * g.L) return;  // whole warps leave together
  const RowOperands<T> op = row_operands(q, k, v, mask, g, row);
  const int hd = static_cast<int>(g.D), dv = static_cast<int>(g.Dv);
  float qr[kPerLane], acc[kPerLane];
  load_row(qr, op.q, lane, hd);
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) acc[r] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const std::int64_t end = g.causal ? min(g.S, op.i + 1) : g.S;
  for (std::int64_t j = 0; j < end; ++j) {
    const float s = score(qr, op.k + j * g.k.row, lane, hd, g.scale, op.mask, j);
    const float m_new = fmaxf(m, s);
    if (m_new == -INFINITY) continue;          // every key so far masked: nothing to add
    const float correction = expf(m - m_new);  // 0 while m is -inf
    const float p = expf(s - m_new);
    l = l * correction + p;
    const T* vj = op.v + j * g.v.row;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) {
      const int d = lane + 32 * r;
      acc[r] = acc[r] * correction + (d < dv ? p * to_float(vj[d]) : 0.0f);
    }
    m = m_new;
  }
  // A row with no key left: nan (softmax's) or 0 (torch's attention, masked_rows_zero).
  const float inv = g.masked_rows_zero && l == 0.0f ? 0.0f : 1.0f / l;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int d = lane + 32 * r;
    if (d < dv) o[row * g.Dv + d] = from_float<T>(acc[r] * inv);
  }
  if (lane == 0) lse[row] = m + logf(l);
}

// dS = p (dO.v_j - dO.o) scale; dq = sum_j dS k_j, dk_j += dS q, dv_j += p dO.
template <typename T>
__global__ void sdpa_backward_kernel(const T* q, const T* k, const T* v, const float* mask,
                                     const T* o, const T* dout, const float* lse, T* dq, float* dk,
                                     float* dv, AttentionGeometry g) {
  const std::int64_t row = blockIdx.x * std::int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= g.B * g.H * g.L) return;
  const RowOperands<T> op = row_operands(q, k, v, mask, g, row);
  const int hd = static_cast<int>(g.D), nv = static_cast<int>(g.Dv);
  float qr[kPerLane], dor[kPerLane], dqr[kPerLane];
  load_row(qr, op.q, lane, hd);
  load_row(dor, dout + row * g.Dv, lane, nv);
  float dsum = 0.0f;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int d = lane + 32 * r;
    if (d < nv) dsum += dor[r] * to_float(o[row * g.Dv + d]);
    dqr[r] = 0.0f;
  }
  dsum = warp_sum(dsum);
  const float row_lse = lse[row];
  // A row with no key (masked_rows_zero): no gradient.
  const std::int64_t end =
      g.masked_rows_zero && row_lse == -INFINITY ? 0 : (g.causal ? min(g.S, op.i + 1) : g.S);
  const std::int64_t kv_rows = (op.b * g.KV + op.kv_head) * g.S;
  for (std::int64_t j = 0; j < end; ++j) {
    const T* kj = op.k + j * g.k.row;
    const T* vj = op.v + j * g.v.row;
    const float s = score(qr, kj, lane, hd, g.scale, op.mask, j);
    if (s == -INFINITY) continue;  // p = 0
    float dp = 0.0f;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) {
      const int d = lane + 32 * r;
      if (d < nv) dp += dor[r] * to_float(vj[d]);
    }
    dp = warp_sum(dp);
    const float p = expf(s - row_lse);
    const float ds = p * (dp - dsum) * g.scale;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) {
      const int d = lane + 32 * r;
      if (d < hd) {
        dqr[r] += ds * to_float(kj[d]);
        atomicAdd(&dk[(kv_rows + j) * g.D + d], ds * qr[r]);
      }
      if (d < nv) atomicAdd(&dv[(kv_rows + j) * g.Dv + d], p * dor[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int d = lane + 32 * r;
    if (d < hd) dq[row * g.D + d] = from_float<T>(dqr[r]);
  }
}

unsigned row_blocks(std::int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

void check_geometry(const AttentionGeometry& g, const char* op) {
  if (g.D < 1 || g.D > kMaxAttentionHeadDim || g.Dv < 1 || g.Dv > kMaxAttentionHeadDim)
    throw_value_error(op, "head dims must be in [1, 128]", g.D > kMaxAttentionHeadDim ? g.D : g.Dv);
  if (g.KV < 1 || g.H % g.KV != 0)
    throw_value_error(op, "query heads must be a multiple of the kv heads", g.KV);
}

}  // namespace

template <typename T>
void sdpa_forward(const T* q, const T* k, const T* v, const float* mask, T* o, float* lse,
                  const AttentionGeometry& g, cudaStream_t stream) {
  check_geometry(g, "sdpa_forward");
  const std::int64_t rows = g.B * g.H * g.L;
  if (rows == 0) return;
  sdpa_forward_kernel<<<row_blocks(rows), kRowsPerBlock * 32, 0, stream>>>(q, k, v, mask, o, lse,
                                                                           g);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void sdpa_backward(const T* q, const T* k, const T* v, const float* mask, const T* o, const T* dout,
                   const float* lse, T* dq, float* dk, float* dv, const AttentionGeometry& g,
                   cudaStream_t stream) {
  check_geometry(g, "sdpa_backward");
  const std::int64_t kv_rows = g.B * g.KV * g.S;
  if (kv_rows > 0) {
    FSDP_CUDA_CHECK(cudaMemsetAsync(dk, 0, kv_rows * g.D * sizeof(float), stream));
    FSDP_CUDA_CHECK(cudaMemsetAsync(dv, 0, kv_rows * g.Dv * sizeof(float), stream));
  }
  const std::int64_t rows = g.B * g.H * g.L;
  if (rows == 0) return;
  sdpa_backward_kernel<<<row_blocks(rows), kRowsPerBlock * 32, 0, stream>>>(q, k, v, mask, o, dout,
                                                                            lse, dq, dk, dv, g);
  FSDP_CUDA_CHECK_LAUNCH();
}

#define FSDP_INSTANTIATE(T)                                                                      \
  template void sdpa_forward<T>(const T*, const T*, const T*, const float*, T*, float*,          \
                                const AttentionGeometry&, cudaStream_t);                         \
  template void sdpa_backward<T>(const T*, const T*, const T*, const float*, const T*, const T*, \
                                 const float*, T*, float*, float*, const AttentionGeometry&,     \
                                 cudaStream_t);
FSDP_INSTANTIATE(float)
FSDP_INSTANTIATE(bf16)
FSDP_INSTANTIATE(fp16)

}  // namespace fsdp::cuda
