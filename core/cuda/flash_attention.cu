// FlashAttention-2's algorithm (Dao, 2023) for head dim 64 on the sm_80+ warp-level matrix
// instructions (mma_sm80.cuh: mma.m16n8k16, ldmatrix, cp.async) with the accumulators in
// registers: T is the 16-bit storage type (bf16 or fp16), every product sums in float. A CTA of
// 4 warps takes 64 rows; each warp owns 16 of them as the A operand of its products, and the
// scores it computes stay in its registers in the C layout, which, rounded to T, is the A layout
// of the next product (mma_sm80.cuh), so P and dS never pass through memory. The other operand's
// tiles stream through shared memory, double-buffered by cp.async (tile j + 1 loads while tile j
// is multiplied), read by ldmatrix (.trans where the product takes them k by n). Scores are kept
// in log2 units (scale * log2(e) folded in) so that exp2f serves; lse is stored in natural units,
// as the one-warp-per-row kernels store it. A CTA's (batch, head) rows are found through the
// operand's strides (FlashGeometry), rows of 64 contiguous elements 16-byte aligned, so the tiles
// load and store the same vectors whether an operand is dense or a view of a packed buffer.
#include <cmath>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/flash_attention.h"
#include "core/cuda/kernel_math.cuh"
#include "core/cuda/mma_sm80.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kHd = kFlashHeadDim;
constexpr int kTile = 64;  // query rows per CTA and key rows per step (equal: the causal
                           // diagonal is one tile)
constexpr int kWarps = 4;
constexpr int kCtaThreads = kWarps * 32;
constexpr int kWarpRows = kTile / kWarps;  // 16: one m16 tile
constexpr int kSteps = kHd / 16;           // k16 steps along the head dim (and along a tile)
constexpr int kN8 = kTile / 8;             // n8 tiles across a tile's 64 columns
static_assert(kTile == kHd, "one register layout serves the score and the output tiles");
// Row pitch of the 16-bit tiles in shared memory: 144 bytes (36 words), so the 8 rows an
// ldmatrix reads start 4 banks apart and hit all 32 banks once; rows stay 16-byte aligned for
// cp.async and the 16-byte stores.
constexpr int kLd = kHd + 8;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// A warp's operand fragments of 16 rows by 64 (A layout, per k16 step) and its float
// accumulators of 16 rows by 64 (C layout, per n8 tile).
using FragsA = unsigned[kSteps][4];
using Acc = float[kN8][4];

__device__ __forceinline__ int lane_id() {
  return threadIdx.x & 31;
}

__device__ __forceinline__ void zero(Acc& acc) {
#pragma unroll
  for (int n = 0; n < kN8; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[n][i] = 0.0f;
}

// One (batch, head)'s rows of an operand: row i's 64 elements from base + i * ld.
template <typename T>
struct Rows {
  T* base;
  std::int64_t ld;
  __device__ T* row(std::int64_t i) const { return base + i * ld; }
};

// The rows of (batch b, head h) of an operand with strides `s`.
template <typename T>
__device__ Rows<T> head_rows(T* p, const AttentionOperandStrides& s, std::int64_t b,
                             std::int64_t h) {
  return {p + b * s.batch + h * s.head, s.row};
}

// The rows of query head (b, h), blockIdx.x = b * H + h, of an operand with strides `s`.
template <typename T>
__device__ Rows<T> rows_of(T* p, const AttentionOperandStrides& s, const FlashGeometry& g) {
  const std::int64_t bh = blockIdx.x;
  return head_rows(p, s, bh / g.H, bh % g.H);
}

// The rows of the kv head that query head blockIdx.x = b * H + h reads (k and v).
template <typename T>
__device__ Rows<T> kv_rows_of(T* p, const AttentionOperandStrides& s, const FlashGeometry& g) {
  const std::int64_t bh = blockIdx.x;
  return head_rows(p, s, bh / g.H, bh % g.H / g.group);
}

// Rows [row0, row0 + 64) of a (t, 64) matrix into a shared tile by cp.async (zeros past row t),
// by the whole CTA, 16 bytes a copy; the caller commits the group.
template <typename T>
__device__ void load_tile_async(Rows<const T> src, std::int64_t row0, std::int64_t t, T* dst) {
#pragma unroll
  for (int idx = threadIdx.x; idx < kTile * (kHd / 8); idx += kCtaThreads) {
    const int r = idx / (kHd / 8), c = (idx % (kHd / 8)) * 8;
    const bool valid = row0 + r < t;
    cp_async_16(dst + r * kLd + c, valid ? src.row(row0 + r) + c : src.base, valid);
  }
}

// The A fragments of 16 rows of a shared tile (the warp's rows): per k16 step, matrices (rows
// 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15), which ldmatrix.x4 returns as a[0..3].
template <typename T>
__device__ void load_a(const T* rows, FragsA& a) {
  const int lane = lane_id();
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk)
    ldmatrix_x4(a[kk], rows + (lane % 16) * kLd + kk * 16 + (lane / 16) * 8);
}

// The C fragments of two adjacent n8 tiles rounded to T: the A fragment of one k16 step.
template <typename T>
__device__ void to_a(const Acc& c, FragsA& a) {
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
    a[kk][0] = pack_floats<T>(c[2 * kk][0], c[2 * kk][1]);
    a[kk][1] = pack_floats<T>(c[2 * kk][2], c[2 * kk][3]);
    a[kk][2] = pack_floats<T>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[kk][3] = pack_floats<T>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
  }
}

// acc += A B for the warp's 16 rows: A (16 x 64) in fragments, B (64 x 64) from a shared tile.
// kRowsAreN: B(k, n) = tile[n][k] (the tile's rows are the product's columns, as keys are in
// Q K^T): ldmatrix gives the B layout directly. Otherwise B(k, n) = tile[k][n] (values in P V),
// read transposed. Each ldmatrix.x4 feeds two n8 tiles of one k16 step.
template <bool kRowsAreN, typename T>
__device__ void warp_product(const FragsA& a, const T* tile, Acc& acc) {
  const int lane = lane_id();
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk)
#pragma unroll
    for (int p = 0; p < kN8 / 2; ++p) {
      unsigned b[4];
      if constexpr (kRowsAreN) {  // matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, ...)
        ldmatrix_x4(
            b, tile + (p * 16 + (lane / 16) * 8 + lane % 8) * kLd + kk * 16 + (lane / 8 % 2) * 8);
      } else {  // matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), ...
        ldmatrix_x4_trans(
            b, tile + (kk * 16 + (lane / 8 % 2) * 8 + lane % 8) * kLd + p * 16 + (lane / 16) * 8);
      }
      const unsigned b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
      mma_m16n8k16<T>(acc[2 * p], a[kk], b0);
      mma_m16n8k16<T>(acc[2 * p + 1], a[kk], b1);
    }
}

// The column of element i of n8 tile n in the C layout (rows: lane / 4, + 8 for i >= 2).
__device__ __forceinline__ int c_col(int n, int i) {
  return n * 8 + 2 * (lane_id() & 3) + (i & 1);
}

// Sum and max over the 4 lanes holding one row (a quad).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Writes the warp's 16 x 64 accumulators, row r (0: lane / 4, + 8 for 1) times mul[r], rounded
// to T, to rows [row0, row0 + 16) of `dst`, skipping rows past t; staged in `staging` (16 rows of
// pitch kLd, the warp's own) for 16-byte stores.
template <typename T>
__device__ void store_warp_rows(const Acc& acc, const float (&mul)[2], Rows<T> dst,
                                std::int64_t row0, std::int64_t t, T* staging) {
  const int lane = lane_id(), g = lane >> 2;
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int n = 0; n < kN8; ++n)
      *reinterpret_cast<unsigned*>(staging + (g + 8 * r) * kLd + c_col(n, 0)) =
          pack_floats<T>(acc[n][2 * r] * mul[r], acc[n][2 * r + 1] * mul[r]);
  __syncwarp();
#pragma unroll
  for (int idx = lane; idx < kWarpRows * (kHd / 8); idx += 32) {
    const int r = idx / (kHd / 8), c = (idx % (kHd / 8)) * 8;
    if (row0 + r < t)
      *reinterpret_cast<uint4*>(dst.row(row0 + r) + c) =
          *reinterpret_cast<const uint4*>(staging + r * kLd + c);
  }
}

// Grid (B * H, query tiles); the last query tiles (the most key tiles) are launched first.
template <typename T>
__global__ void __launch_bounds__(kCtaThreads)
    flash_forward_kernel(const T* q_, const T* k_, const T* v_, T* o_, float* lse,
                         FlashGeometry geo) {
  __shared__ __align__(16) T ks[2][kTile * kLd];
  __shared__ __align__(16) T vs[2][kTile * kLd];
  const Rows<const T> q = rows_of(q_, geo.q, geo), k = kv_rows_of(k_, geo.k, geo),
                      v = kv_rows_of(v_, geo.v, geo);
  const std::int64_t t = geo.t;
  const float scale_log2 = geo.scale * kLog2e;
  const int qb = gridDim.y - 1 - blockIdx.y;
  const std::int64_t bh = blockIdx.x, q0 = std::int64_t(qb) * kTile;
  const int warp = threadIdx.x >> 5, g = lane_id() >> 2;
  const std::int64_t row0 = q0 + warp * kWarpRows;        // the warp's first query row
  const std::int64_t rows[2] = {row0 + g, row0 + g + 8};  // the lane's two rows

  // Q's tile through ks[1] (free until the second key tile) into fragments, key tile 0 with it.
  load_tile_async(q, q0, t, ks[1]);
  load_tile_async(k, 0, t, ks[0]);
  load_tile_async(v, 0, t, vs[0]);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  FragsA qf;
  load_a(ks[1] + warp * kWarpRows * kLd, qf);
  __syncthreads();

  Acc acc;
  zero(acc);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // l: this lane's part of the sum
  for (int kb = 0; kb <= qb; ++kb) {
    const int stage = kb & 1;
    if (kb < qb) {  // the next key tile loads while this one is multiplied
      const std::int64_t next = std::int64_t(kb + 1) * kTile;
      load_tile_async(k, next, t, ks[stage ^ 1]);
      load_tile_async(v, next, t, vs[stage ^ 1]);
    }
    cp_async_commit();
    cp_async_wait<1>();  // all but the group just issued: tile kb is here
    __syncthreads();
    Acc s;
    zero(s);
    warp_product<true>(qf, ks[stage], s);  // S = Q K^T
    // Only the diagonal tile is masked: earlier key tiles are whole and before every row. Key 0
    // is unmasked for every row, so m is finite from the first tile on.
    const std::int64_t k0 = std::int64_t(kb) * kTile;
#pragma unroll
    for (int n = 0; n < kN8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        s[n][i] = (kb < qb || k0 + c_col(n, i) <= rows[i >> 1]) ? s[n][i] * scale_log2 : -INFINITY;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < kN8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
      const float m_new = fmaxf(m[r], quad_max(mx));
      const float correction = exp2f(m[r] - m_new);  // 0 on the first tile (m = -inf)
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kN8; ++n)
#pragma unroll
        for (int i = 2 * r; i < 2 * r + 2; ++i) {
          s[n][i] = exp2f(s[n][i] - m_new);
          sum += s[n][i];
          acc[n][i] *= correction;
        }
      l[r] = l[r] * correction + sum;
      m[r] = m_new;
    }
    FragsA pf;
    to_a<T>(s, pf);
    warp_product<false>(pf, vs[stage], acc);  // O += P V
    __syncthreads();  // every warp is done with this stage before it is loaded again
  }
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = quad_sum(l[r]);
    inv[r] = 1.0f / l[r];
    if ((lane_id() & 3) == 0 && rows[r] < t) lse[bh * t + rows[r]] = (m[r] + log2f(l[r])) * kLn2;
  }
  store_warp_rows(acc, inv, rows_of(o_, geo.o, geo), row0, t, ks[0] + warp * kWarpRows * kLd);
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

// D = dO . o (float) and lse in log2 units of the 64 query rows from q0, into d_s and lse_s (0
// for rows past t): a thread pair per row (lane ^ 1), each taking 32 of its 64 dims in 16-byte
// vectors, o from device memory, dO from its shared tile. `lse` starts at the (batch, head).
template <typename T>
__device__ void tile_row_stats(Rows<const T> o, const T* do_tile, const float* lse, std::int64_t q0,
                               std::int64_t t, float* d_s, float* lse_s) {
  const int row = threadIdx.x >> 1, half = threadIdx.x & 1;
  const std::int64_t qi = q0 + row;
  const bool valid = qi < t;
  float s = 0.0f;
  if (valid) {
#pragma unroll
    for (int u = 0; u < kHd / 16; ++u) {
      const int c = half * (kHd / 2) + u * 8;
      const uint4 a = *reinterpret_cast<const uint4*>(o.row(qi) + c);
      const uint4 b = *reinterpret_cast<const uint4*>(do_tile + row * kLd + c);
      s += dot2<T>(a.x, b.x) + dot2<T>(a.y, b.y) + dot2<T>(a.z, b.z) + dot2<T>(a.w, b.w);
    }
  }
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  if (half == 0) {
    d_s[row] = s;
    lse_s[row] = valid ? lse[qi] * kLog2e : 0.0f;
  }
}

// dq = scale * dS K with dS = P * (dO V^T - D), P = exp2(S - lse) recomputed per key tile.
// Grid as the forward's; Q's and dO's rows stay in registers, K and V stream.
template <typename T>
__global__ void __launch_bounds__(kCtaThreads)
    flash_backward_dq_kernel(const T* q_, const T* k_, const T* v_, const T* o_, const T* dout_,
                             const float* lse, T* dq_, FlashGeometry geo) {
  __shared__ __align__(16) T ks[2][kTile * kLd];
  __shared__ __align__(16) T vs[2][kTile * kLd];
  __shared__ float d_s[kTile], lse_s[kTile];
  const Rows<const T> q = rows_of(q_, geo.q, geo), k = kv_rows_of(k_, geo.k, geo),
                      v = kv_rows_of(v_, geo.v, geo), dout = rows_of(dout_, geo.dout, geo);
  const std::int64_t t = geo.t;
  const float scale = geo.scale, scale_log2 = geo.scale * kLog2e;
  const int qb = gridDim.y - 1 - blockIdx.y;
  const std::int64_t bh = blockIdx.x, q0 = std::int64_t(qb) * kTile;
  const int warp = threadIdx.x >> 5, g = lane_id() >> 2;
  const std::int64_t row0 = q0 + warp * kWarpRows;
  const std::int64_t rows[2] = {row0 + g, row0 + g + 8};

  // Q's and dO's tiles through stage 1 (free until the second key tile), key tile 0 with them.
  load_tile_async(q, q0, t, ks[1]);
  load_tile_async(dout, q0, t, vs[1]);
  load_tile_async(k, 0, t, ks[0]);
  load_tile_async(v, 0, t, vs[0]);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  tile_row_stats(rows_of(o_, geo.o, geo), vs[1], lse + bh * t, q0, t, d_s, lse_s);
  FragsA qf, dof;
  load_a(ks[1] + warp * kWarpRows * kLd, qf);
  load_a(vs[1] + warp * kWarpRows * kLd, dof);
  __syncthreads();
  float d_row[2], lse_row[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    d_row[r] = d_s[warp * kWarpRows + g + 8 * r];
    lse_row[r] = lse_s[warp * kWarpRows + g + 8 * r];
  }

  Acc dqacc;
  zero(dqacc);
  for (int kb = 0; kb <= qb; ++kb) {
    const int stage = kb & 1;
    if (kb < qb) {
      const std::int64_t next = std::int64_t(kb + 1) * kTile;
      load_tile_async(k, next, t, ks[stage ^ 1]);
      load_tile_async(v, next, t, vs[stage ^ 1]);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const std::int64_t k0 = std::int64_t(kb) * kTile;
    Acc p;
    zero(p);
    warp_product<true>(qf, ks[stage], p);  // S = Q K^T, then P in place
#pragma unroll
    for (int n = 0; n < kN8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const std::int64_t row = rows[i >> 1];
        p[n][i] = (row < t && (kb < qb || k0 + c_col(n, i) <= row))
                      ? exp2f(p[n][i] * scale_log2 - lse_row[i >> 1])
                      : 0.0f;
      }
    Acc ds;
    zero(ds);
    warp_product<true>(dof, vs[stage], ds);  // dP = dO V^T, then dS in place
#pragma unroll
    for (int n = 0; n < kN8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) ds[n][i] = p[n][i] * (ds[n][i] - d_row[i >> 1]);
    FragsA dsf;
    to_a<T>(ds, dsf);
    warp_product<false>(dsf, ks[stage], dqacc);  // dQ += dS K
    __syncthreads();  // every warp is done with this stage before it is loaded again
  }
  const float mul[2] = {scale, scale};
  store_warp_rows(dqacc, mul, rows_of(dq_, geo.dq, geo), row0, t, ks[0] + warp * kWarpRows * kLd);
}

// Per key tile of a kv head: dv = P^T dO and dk = scale * dS^T Q over the query tiles at or after
// it, of each query head of the head's group in turn (one loop over (head, query tile), so the
// loads stay double-buffered across heads). The warp's 16 keys are the rows of its products
// (S^T = K Q^T, dP^T = V dO^T), K's and V's rows in registers; Q and dO stream. Grid
// (B * H / group, key tiles); key tile 0, with the most query tiles, first.
template <typename T>
__global__ void __launch_bounds__(kCtaThreads)
    flash_backward_dkdv_kernel(const T* q_, const T* k_, const T* v_, const T* o_, const T* dout_,
                               const float* lse, T* dk_, T* dv_, FlashGeometry geo) {
  __shared__ __align__(16) T qs[2][kTile * kLd];
  __shared__ __align__(16) T dos[2][kTile * kLd];
  __shared__ float d_s[kTile], lse_s[kTile];
  const std::int64_t kv_heads = geo.H / geo.group;
  const std::int64_t b = blockIdx.x / kv_heads, kvh = blockIdx.x % kv_heads;
  const Rows<const T> k = head_rows(k_, geo.k, b, kvh), v = head_rows(v_, geo.v, b, kvh);
  const std::int64_t t = geo.t;
  const float scale = geo.scale, scale_log2 = geo.scale * kLog2e;
  const int kb = blockIdx.y;
  const std::int64_t k0 = std::int64_t(kb) * kTile;
  const int warp = threadIdx.x >> 5, g = lane_id() >> 2;
  const std::int64_t row0 = k0 + warp * kWarpRows;
  const std::int64_t keys[2] = {row0 + g, row0 + g + 8};  // the lane's two key rows
  // Step s: query head kvh * group + s / tiles, query tile kb + s % tiles.
  const int tiles = static_cast<int>((t + kTile - 1) / kTile) - kb;
  const int steps = static_cast<int>(geo.group) * tiles;
  auto head_of = [&](int s) { return kvh * geo.group + s / tiles; };
  auto tile_of = [&](int s) { return kb + s % tiles; };

  // K's and V's tiles through stage 1, the first step's query tile with them.
  load_tile_async(k, k0, t, qs[1]);
  load_tile_async(v, k0, t, dos[1]);
  load_tile_async(head_rows(q_, geo.q, b, head_of(0)), k0, t, qs[0]);
  load_tile_async(head_rows(dout_, geo.dout, b, head_of(0)), k0, t, dos[0]);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  FragsA kf, vf;
  load_a(qs[1] + warp * kWarpRows * kLd, kf);
  load_a(dos[1] + warp * kWarpRows * kLd, vf);
  __syncthreads();

  Acc dkacc, dvacc;
  zero(dkacc);
  zero(dvacc);
  for (int step = 0; step < steps; ++step) {
    const int stage = step & 1;
    if (step + 1 < steps) {
      const std::int64_t next = std::int64_t(tile_of(step + 1)) * kTile, h = head_of(step + 1);
      load_tile_async(head_rows(q_, geo.q, b, h), next, t, qs[stage ^ 1]);
      load_tile_async(head_rows(dout_, geo.dout, b, h), next, t, dos[stage ^ 1]);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const int qb = tile_of(step);
    const std::int64_t q0 = std::int64_t(qb) * kTile, h = head_of(step);
    tile_row_stats(head_rows(o_, geo.o, b, h), dos[stage], lse + (b * geo.H + h) * t, q0, t, d_s,
                   lse_s);
    __syncthreads();
    Acc p;
    zero(p);
    warp_product<true>(kf, qs[stage], p);  // S^T = K Q^T, then P^T in place
#pragma unroll
    for (int n = 0; n < kN8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int col = c_col(n, i);
        const std::int64_t qi = q0 + col;
        p[n][i] = (qi < t && (qb > kb || keys[i >> 1] <= qi))
                      ? exp2f(p[n][i] * scale_log2 - lse_s[col])
                      : 0.0f;
      }
    FragsA pf;
    to_a<T>(p, pf);
    warp_product<false>(pf, dos[stage], dvacc);  // dV += P^T dO
    Acc ds;
    zero(ds);
    warp_product<true>(vf, dos[stage], ds);  // dP^T = V dO^T, then dS^T in place
#pragma unroll
    for (int n = 0; n < kN8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) ds[n][i] = p[n][i] * (ds[n][i] - d_s[c_col(n, i)]);
    FragsA dsf;
    to_a<T>(ds, dsf);
    warp_product<false>(dsf, qs[stage], dkacc);  // dK += dS^T Q
    __syncthreads();  // every warp is done with this stage, d_s and lse_s
  }
  const float mul_dk[2] = {scale, scale}, mul_dv[2] = {1.0f, 1.0f};
  // The loop's last barrier freed both stages: each warp stages its own 16 rows there.
  store_warp_rows(dkacc, mul_dk, head_rows(dk_, geo.dk, b, kvh), row0, t,
                  qs[0] + warp * kWarpRows * kLd);
  store_warp_rows(dvacc, mul_dv, head_rows(dv_, geo.dv, b, kvh), row0, t,
                  dos[0] + warp * kWarpRows * kLd);
}

// (heads, tiles): heads = B * H for the query heads' kernels, B * H / group for dk and dv.
dim3 tile_grid(const FlashGeometry& g, std::int64_t heads) {
  return dim3(static_cast<unsigned>(heads), static_cast<unsigned>((g.t + kTile - 1) / kTile));
}

}  // namespace

bool flash_attention_applies(const FlashGeometry& g, std::int64_t hd,
                             std::initializer_list<const void*> pointers) {
  if (hd != kHd || g.group < 1 || g.H % g.group != 0 || g.B * g.H > 0x7fffffff ||
      (g.t + kTile - 1) / kTile > 65535)
    return false;
  for (const void* p : pointers)
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  // Every row's start 16-byte aligned too: strides of whole 16-byte vectors of 16-bit elements.
  for (const AttentionOperandStrides& s : {g.q, g.k, g.v, g.o, g.dout, g.dq, g.dk, g.dv})
    if (s.batch % 8 != 0 || s.head % 8 != 0 || s.row % 8 != 0) return false;
  return true;
}

template <typename T>
void flash_attention_forward(const T* q, const T* k, const T* v, T* o, float* lse,
                             const FlashGeometry& g, cudaStream_t stream) {
  flash_forward_kernel<T><<<tile_grid(g, g.B * g.H), kCtaThreads, 0, stream>>>(q, k, v, o, lse, g);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void flash_attention_backward(const T* q, const T* k, const T* v, const T* o, const T* dout,
                              const float* lse, T* dq, T* dk, T* dv, const FlashGeometry& g,
                              cudaStream_t stream) {
  flash_backward_dkdv_kernel<T><<<tile_grid(g, g.B * g.H / g.group), kCtaThreads, 0, stream>>>(
      q, k, v, o, dout, lse, dk, dv, g);
  FSDP_CUDA_CHECK_LAUNCH();
  flash_backward_dq_kernel<T>
      <<<tile_grid(g, g.B * g.H), kCtaThreads, 0, stream>>>(q, k, v, o, dout, lse, dq, g);
  FSDP_CUDA_CHECK_LAUNCH();
}

#define FSDP_INSTANTIATE(T)                                                                   \
  template void flash_attention_forward<T>(const T*, const T*, const T*, T*, float*,          \
                                           const FlashGeometry&, cudaStream_t);               \
  template void flash_attention_backward<T>(const T*, const T*, const T*, const T*, const T*, \
                                            const float*, T*, T*, T*, const FlashGeometry&,   \
                                            cudaStream_t);
FSDP_INSTANTIATE(__nv_bfloat16)
FSDP_INSTANTIATE(__half)

}  // namespace fsdp::cuda
