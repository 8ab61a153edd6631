// FlashAttention-2's schedule (Dao, 2023) on nvcuda::wmma 16x16x16 fragments of the 16-bit
// storage type T (bf16 or fp16; float accumulators either way), for head dim 64. A CTA of 4 warps
// takes a 64-row tile; each warp owns 16 of its rows. The products go through the tensor cores; the
// accumulators pass through a per-warp float scratch in shared memory, where each lane pair owns
// one row (lane >> 1) and the even or odd columns (lane & 1), so the softmax and masking need no
// knowledge of the fragments' register layout. Scores are kept in log2 units (scale * log2(e)
// folded in) so that exp2f serves; lse is stored in natural units, as the one-warp-per-row kernels
// store it.
#include <mma.h>

#include <cmath>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/flash_attention.h"
#include "core/cuda/kernel_math.cuh"

namespace fsdp::cuda {
namespace {

using namespace nvcuda;

constexpr int kHd = kFlashHeadDim;
constexpr int kTile = 64;  // query rows per CTA and key rows per step (equal: the causal
                           // diagonal is one tile)
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kWarpRows = kTile / kWarps;  // 16, one fragment high
constexpr int kFrags = kHd / 16;           // fragments along the head dim (and along a tile)
// Row pitches in shared memory, padded off the 128-byte bank period; rows stay 16-byte aligned
// for the vector copies and fragment origins 32-byte aligned as wmma requires.
constexpr int kLdH = kHd + 8;        // 16-bit tiles: 144 bytes
constexpr int kLdF = kTile + 4;      // float scratch: 272 bytes
constexpr int kPerLane = kTile / 2;  // columns of a row each lane of the pair owns
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
static_assert(kTile == kHd, "one scratch layout serves the score and the output tiles");

template <typename T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T>
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
template <typename T>
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Rows [row0, row0 + 64) of a (t, 64) matrix into shared memory, zeros past row t, by the
// whole CTA in 16-byte vectors.
template <typename T>
__device__ void load_tile(const T* src, std::int64_t row0, std::int64_t t, T* dst) {
  for (int idx = threadIdx.x; idx < kTile * (kHd / 8); idx += kThreads) {
    const int r = idx / (kHd / 8), c = (idx % (kHd / 8)) * 8;
    uint4 val = make_uint4(0u, 0u, 0u, 0u);
    if (row0 + r < t) val = *reinterpret_cast<const uint4*>(src + (row0 + r) * kHd + c);
    *reinterpret_cast<uint4*>(dst + r * kLdH + c) = val;
  }
}

// A warp's 16 x 64 product A (16 x 64, fragments `a`) times B (64 x 64 in shared memory, row
// pitch kLdH) into its float scratch. kTransB: B is the transpose of the stored tile (scores
// against keys stored row by key), read column-major.
template <bool kTransB, typename T>
__device__ void product_to_scratch(const FragA<T> (&a)[kFrags], const T* b, float* scratch) {
#pragma unroll 1  // not unrolled: ptxas would hoist all 16 B fragments (spills on sm_80)
  for (int n = 0; n < kFrags; ++n) {
    FragC c;
    wmma::fill_fragment(c, 0.0f);
#pragma unroll
    for (int kk = 0; kk < kFrags; ++kk) {
      if constexpr (kTransB) {
        FragBCol<T> bf;
        wmma::load_matrix_sync(bf, b + n * 16 * kLdH + kk * 16, kLdH);
        wmma::mma_sync(c, a[kk], bf, c);
      } else {
        FragBRow<T> bf;
        wmma::load_matrix_sync(bf, b + kk * 16 * kLdH + n * 16, kLdH);
        wmma::mma_sync(c, a[kk], bf, c);
      }
    }
    wmma::store_matrix_sync(scratch + n * 16, c, kLdF, wmma::mem_row_major);
  }
}

// acc[n] += A (16 x 64 in shared memory, pitch kLdH) times B (64 x 64 row-major in shared
// memory, pitch kLdH): the gradient products, accumulated across the loop in fragments.
// One A fragment live at a time: the accumulators already hold 32 or 64 registers.
template <typename T>
__device__ void product_accumulate(const T* a, const T* b, FragC (&acc)[kFrags]) {
#pragma unroll
  for (int kk = 0; kk < kFrags; ++kk) {
    FragA<T> af;
    wmma::load_matrix_sync(af, a + kk * 16, kLdH);
#pragma unroll
    for (int n = 0; n < kFrags; ++n) {
      FragBRow<T> bf;
      wmma::load_matrix_sync(bf, b + kk * 16 * kLdH + n * 16, kLdH);
      wmma::mma_sync(acc[n], af, bf, acc[n]);
    }
  }
}

template <typename T>
__device__ void load_rows(const T* tile, FragA<T> (&a)[kFrags]) {
#pragma unroll
  for (int kk = 0; kk < kFrags; ++kk) wmma::load_matrix_sync(a[kk], tile + kk * 16, kLdH);
}

// The dot product of two words of two T each, unpacked from the words' bits (bf16 is float's
// upper half; fp16 through its bits): no reading of a uint4 through another type, which strict
// aliasing would allow a compiler to break (a host-compiled emulation of these kernels did).
template <typename T>
__device__ __forceinline__ float dot2(unsigned a, unsigned b) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __uint_as_float(a << 16) * __uint_as_float(b << 16) +
           __uint_as_float(a & 0xffff0000u) * __uint_as_float(b & 0xffff0000u);
  } else {
    auto lo = [](unsigned w) { return __half2float(__ushort_as_half(w & 0xffffu)); };
    auto hi = [](unsigned w) { return __half2float(__ushort_as_half(w >> 16)); };
    return lo(a) * lo(b) + hi(a) * hi(b);
  }
}

// dO . o of one row (either pointer global or shared, 16-byte aligned), each lane of the pair
// (lane ^ 1) taking 32 of its 64 dims in 16-byte vectors; both lanes return the sum. Zero for rows
// past t (valid false).
template <typename T>
__device__ float row_dot_pair(const T* o_row, const T* do_row, bool valid, int half) {
  float s = 0.0f;
  if (valid) {
#pragma unroll
    for (int u = 0; u < kPerLane / 8; ++u) {
      const uint4 a = *reinterpret_cast<const uint4*>(o_row + half * kPerLane + u * 8);
      const uint4 b = *reinterpret_cast<const uint4*>(do_row + half * kPerLane + u * 8);
      s += dot2<T>(a.x, b.x) + dot2<T>(a.y, b.y) + dot2<T>(a.z, b.z) + dot2<T>(a.w, b.w);
    }
  }
  return s + __shfl_xor_sync(0xffffffffu, s, 1);
}

// Copies a warp's 16 x 64 float scratch times `mul` to rows [row0, row0 + 16) of `dst`
// (t, 64), skipping rows past t.
template <typename Out>
__device__ void store_rows(const float* scratch, float mul, Out* dst, std::int64_t row0,
                           std::int64_t t, int lane) {
  for (int idx = lane; idx < kWarpRows * kHd; idx += 32) {
    const int r = idx / kHd, c = idx % kHd;
    if (row0 + r < t) {
      const float x = scratch[r * kLdF + c] * mul;
      dst[(row0 + r) * kHd + c] = from_float<Out>(x);
    }
  }
}

// Grid (batch, query tiles); the last query tiles (the most key tiles) are launched first.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(const T* q, const T* k, const T* v, T* o, float* lse, std::int64_t t,
                         float scale_log2) {
  __shared__ __align__(32) T ks[kTile * kLdH];
  __shared__ __align__(32) T vs[kTile * kLdH];
  __shared__ __align__(32) T ps[kWarps * kWarpRows * kLdH];
  __shared__ __align__(32) float ss[kWarps * kWarpRows * kLdF];
  const int qb = gridDim.y - 1 - blockIdx.y;
  const std::int64_t b = blockIdx.x, base = b * t * kHd, q0 = std::int64_t(qb) * kTile;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r = lane >> 1, half = lane & 1;          // the lane's row in the warp and column parity
  const std::int64_t i = q0 + warp * kWarpRows + r;  // the lane's query row
  float* sw = ss + warp * kWarpRows * kLdF;
  T* pw = ps + warp * kWarpRows * kLdH;

  // Q's tile passes through the scratch (free until the first scores) into fragments.
  T* qs = reinterpret_cast<T*>(ss);
  static_assert(sizeof(ss) >= sizeof(T) * kTile * kLdH);
  load_tile(q + base, q0, t, qs);
  __syncthreads();
  FragA<T> qf[kFrags];
  load_rows(qs + warp * kWarpRows * kLdH, qf);
  __syncthreads();

  float acc[kPerLane];
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) acc[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;  // l: this lane's half of the row sum
  for (int kb = 0; kb <= qb; ++kb) {
    const std::int64_t k0 = std::int64_t(kb) * kTile;
    load_tile(k + base, k0, t, ks);
    load_tile(v + base, k0, t, vs);
    __syncthreads();
    product_to_scratch<true>(qf, ks, sw);  // S = Q K^T
    __syncwarp();
    // Key 0 is in the first tile and unmasked for every row, so m is finite from then on.
    float s[kPerLane], mx = -INFINITY;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int col = 2 * c + half;
      const std::int64_t j = k0 + col;
      s[c] = (j <= i && j < t) ? sw[r * kLdF + col] * scale_log2 : -INFINITY;
      mx = fmaxf(mx, s[c]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m, mx);
    const float correction = exp2f(m - m_new);  // 0 on the first tile (m = -inf)
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const float p = exp2f(s[c] - m_new);
      pw[r * kLdH + 2 * c + half] = from_float<T>(p);
      sum += p;
      acc[c] *= correction;
    }
    l = l * correction + sum;
    m = m_new;
    __syncwarp();
    FragA<T> pf[kFrags];
    load_rows(pw, pf);
    product_to_scratch<false>(pf, vs, sw);  // P V
    __syncwarp();
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) acc[c] += sw[r * kLdF + 2 * c + half];
    __syncthreads();  // every warp is done with ks and vs
  }
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  const float inv = 1.0f / l;
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) sw[r * kLdF + 2 * c + half] = acc[c] * inv;
  if (i < t && half == 0) lse[b * t + i] = (m + log2f(l)) * kLn2;
  __syncwarp();
  store_rows(sw, 1.0f, o + base, q0 + warp * kWarpRows, t, lane);
}

// dq = scale * dS K with dS = P * (dO V^T - D), D = rowsum(dO * o). Grid as the forward's.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    flash_backward_dq_kernel(const T* q, const T* k, const T* v, const T* o, const T* dout,
                             const float* lse, T* dq, std::int64_t t, float scale_log2,
                             float scale) {
  __shared__ __align__(32) T ks[kTile * kLdH];
  __shared__ __align__(32) T vs[kTile * kLdH];
  __shared__ __align__(32) T dss[kWarps * kWarpRows * kLdH];
  __shared__ __align__(32) float ss[kWarps * kWarpRows * kLdF];
  const int qb = gridDim.y - 1 - blockIdx.y;
  const std::int64_t b = blockIdx.x, base = b * t * kHd, q0 = std::int64_t(qb) * kTile;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r = lane >> 1, half = lane & 1;
  const std::int64_t i = q0 + warp * kWarpRows + r;
  float* sw = ss + warp * kWarpRows * kLdF;
  T* dsw = dss + warp * kWarpRows * kLdH;

  // Q's and dO's tiles pass through ks and vs (free until the loop) into fragments.
  load_tile(q + base, q0, t, ks);
  load_tile(dout + base, q0, t, vs);
  __syncthreads();
  FragA<T> qf[kFrags], dof[kFrags];
  load_rows(ks + warp * kWarpRows * kLdH, qf);
  load_rows(vs + warp * kWarpRows * kLdH, dof);
  const bool valid = i < t;
  const float d_row = row_dot_pair(o + base + i * kHd, dout + base + i * kHd, valid, half);
  const float lse_row = valid ? lse[b * t + i] * kLog2e : 0.0f;
  __syncthreads();

  FragC dqacc[kFrags];
#pragma unroll
  for (int n = 0; n < kFrags; ++n) wmma::fill_fragment(dqacc[n], 0.0f);
  for (int kb = 0; kb <= qb; ++kb) {
    const std::int64_t k0 = std::int64_t(kb) * kTile;
    load_tile(k + base, k0, t, ks);
    load_tile(v + base, k0, t, vs);
    __syncthreads();
    product_to_scratch<true>(qf, ks, sw);  // S = Q K^T
    __syncwarp();
    // P waits in dsw (T, as the products take it) while dP takes the scratch; each lane then
    // turns its own elements into dS in place.
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int col = 2 * c + half;
      const std::int64_t j = k0 + col;
      const float p = (valid && j <= i) ? exp2f(sw[r * kLdF + col] * scale_log2 - lse_row) : 0.0f;
      dsw[r * kLdH + col] = from_float<T>(p);
    }
    __syncwarp();
    product_to_scratch<true>(dof, vs, sw);  // dP = dO V^T
    __syncwarp();
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int col = 2 * c + half;
      const float p = to_float(dsw[r * kLdH + col]);
      dsw[r * kLdH + col] = from_float<T>(p * (sw[r * kLdF + col] - d_row));
    }
    __syncwarp();
    product_accumulate(dsw, ks, dqacc);  // dQ += dS K
    __syncthreads();                     // every warp is done with ks and vs
  }
#pragma unroll
  for (int n = 0; n < kFrags; ++n)
    wmma::store_matrix_sync(sw + n * 16, dqacc[n], kLdF, wmma::mem_row_major);
  __syncwarp();
  store_rows(sw, scale, dq + base, q0 + warp * kWarpRows, t, lane);
}

// Per key tile: dv = P^T dO and dk = scale * dS^T Q over the query tiles at or after it. The
// warp's 16 keys are the rows of its products (S^T = K Q^T, dP^T = V dO^T). Grid (batch, key
// tiles); key tile 0, with the most query tiles, first.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    flash_backward_dkdv_kernel(const T* q, const T* k, const T* v, const T* o, const T* dout,
                               const float* lse, float* dk, float* dv, std::int64_t t,
                               float scale_log2, float scale) {
  __shared__ __align__(32) T qs[kTile * kLdH];
  __shared__ __align__(32) T dos[kTile * kLdH];
  __shared__ __align__(32) T ps[kWarps * kWarpRows * kLdH];
  __shared__ __align__(32) float ss[kWarps * kWarpRows * kLdF];
  __shared__ float lse_s[kTile], d_s[kTile];
  const int kb = blockIdx.y;
  const std::int64_t b = blockIdx.x, base = b * t * kHd, k0 = std::int64_t(kb) * kTile;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r = lane >> 1, half = lane & 1;
  const std::int64_t j = k0 + warp * kWarpRows + r;  // the lane's key row
  float* sw = ss + warp * kWarpRows * kLdF;
  T* pw = ps + warp * kWarpRows * kLdH;
  const int n_q = static_cast<int>((t + kTile - 1) / kTile);

  // K's and V's tiles pass through qs and dos (free until the loop) into fragments.
  load_tile(k + base, k0, t, qs);
  load_tile(v + base, k0, t, dos);
  __syncthreads();
  FragA<T> kf[kFrags], vf[kFrags];
  load_rows(qs + warp * kWarpRows * kLdH, kf);
  load_rows(dos + warp * kWarpRows * kLdH, vf);
  __syncthreads();

  FragC dkacc[kFrags], dvacc[kFrags];
#pragma unroll
  for (int n = 0; n < kFrags; ++n) {
    wmma::fill_fragment(dkacc[n], 0.0f);
    wmma::fill_fragment(dvacc[n], 0.0f);
  }
  for (int qb = kb; qb < n_q; ++qb) {
    const std::int64_t q0 = std::int64_t(qb) * kTile;
    load_tile(q + base, q0, t, qs);
    load_tile(dout + base, q0, t, dos);
    __syncthreads();  // dO's tile is read for D
    {  // D and lse (log2 units) of the tile's 64 query rows: a thread pair per row, o from
       // device memory, dO from its tile
      const int row = threadIdx.x >> 1, part = threadIdx.x & 1;
      const std::int64_t qi = q0 + row;
      const bool valid = qi < t;
      const float d = row_dot_pair(o + base + qi * kHd, dos + row * kLdH, valid, part);
      if (part == 0) {
        d_s[row] = d;
        lse_s[row] = valid ? lse[b * t + qi] * kLog2e : 0.0f;
      }
    }
    __syncthreads();
    product_to_scratch<true>(kf, qs, sw);  // S^T = K Q^T
    __syncwarp();
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int col = 2 * c + half;
      const std::int64_t qi = q0 + col;
      const float p =
          (j <= qi && qi < t) ? exp2f(sw[r * kLdF + col] * scale_log2 - lse_s[col]) : 0.0f;
      pw[r * kLdH + col] = from_float<T>(p);
    }
    __syncwarp();
    product_accumulate(pw, dos, dvacc);     // dV += P^T dO
    product_to_scratch<true>(vf, dos, sw);  // dP^T = V dO^T
    __syncwarp();
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {  // dS^T in place of P^T, element by element
      const int col = 2 * c + half;
      const float p = to_float(pw[r * kLdH + col]);
      pw[r * kLdH + col] = from_float<T>(p * (sw[r * kLdF + col] - d_s[col]));
    }
    __syncwarp();
    product_accumulate(pw, qs, dkacc);  // dK += dS^T Q
    __syncthreads();                    // every warp is done with qs, dos, lse_s and d_s
  }
#pragma unroll
  for (int n = 0; n < kFrags; ++n)
    wmma::store_matrix_sync(sw + n * 16, dkacc[n], kLdF, wmma::mem_row_major);
  __syncwarp();
  store_rows(sw, scale, dk + base, k0 + warp * kWarpRows, t, lane);
  __syncwarp();
#pragma unroll
  for (int n = 0; n < kFrags; ++n)
    wmma::store_matrix_sync(sw + n * 16, dvacc[n], kLdF, wmma::mem_row_major);
  __syncwarp();
  store_rows(sw, 1.0f, dv + base, k0 + warp * kWarpRows, t, lane);
}

dim3 tile_grid(std::int64_t batch, std::int64_t t) {
  return dim3(static_cast<unsigned>(batch), static_cast<unsigned>((t + kTile - 1) / kTile));
}

}  // namespace

bool flash_attention_applies(std::int64_t batch, std::int64_t t, std::int64_t hd,
                             std::initializer_list<const void*> pointers) {
  if (hd != kHd || batch > 0x7fffffff || (t + kTile - 1) / kTile > 65535) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  return true;
}

template <typename T>
void flash_attention_forward(const T* q, const T* k, const T* v, T* o, float* lse,
                             std::int64_t batch, std::int64_t t, float scale, cudaStream_t stream) {
  flash_forward_kernel<T>
      <<<tile_grid(batch, t), kThreads, 0, stream>>>(q, k, v, o, lse, t, scale * kLog2e);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void flash_attention_backward(const T* q, const T* k, const T* v, const T* o, const T* dout,
                              const float* lse, T* dq, float* dk, float* dv, std::int64_t batch,
                              std::int64_t t, float scale, cudaStream_t stream) {
  const dim3 grid = tile_grid(batch, t);
  flash_backward_dkdv_kernel<T>
      <<<grid, kThreads, 0, stream>>>(q, k, v, o, dout, lse, dk, dv, t, scale * kLog2e, scale);
  FSDP_CUDA_CHECK_LAUNCH();
  flash_backward_dq_kernel<T>
      <<<grid, kThreads, 0, stream>>>(q, k, v, o, dout, lse, dq, t, scale * kLog2e, scale);
  FSDP_CUDA_CHECK_LAUNCH();
}

#define FSDP_INSTANTIATE(T)                                                                        \
  template void flash_attention_forward<T>(const T*, const T*, const T*, T*, float*, std::int64_t, \
                                           std::int64_t, float, cudaStream_t);                     \
  template void flash_attention_backward<T>(const T*, const T*, const T*, const T*, const T*,      \
                                            const float*, T*, float*, float*, std::int64_t,        \
                                            std::int64_t, float, cudaStream_t);
FSDP_INSTANTIATE(__nv_bfloat16)
FSDP_INSTANTIATE(__half)

}  // namespace fsdp::cuda
