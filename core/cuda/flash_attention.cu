// FlashAttention-2's algorithm (Dao, 2023) for head dims 64, 96 and 128 on the sm_80+ warp-level
// matrix instructions (mma_sm80.cuh: mma.m16n8k16, ldmatrix, cp.async) with the accumulators in
// registers: T is the 16-bit storage type (bf16 or fp16), every product sums in float. A CTA of
// 4 warps takes 64 rows; each warp owns 16 of them as the A operand of its products, and the
// scores it computes stay in its registers in the C layout, which, rounded to T, is the A layout
// of the next product (mma_sm80.cuh), so P and dS never pass through memory. The other operand's
// tiles stream through shared memory, double-buffered by cp.async (tile j + 1 loads while tile j
// is multiplied), read by ldmatrix (.trans where the product takes them k by n). Scores are kept
// in log2 units (scale * log2(e) folded in) so that exp2f serves; lse is stored in natural units,
// as the one-warp-per-row kernels store it. A CTA's (batch, head) rows are found through the
// operand's strides (FlashGeometry), rows of hd contiguous elements 16-byte aligned, so the tiles
// load and store the same vectors whether an operand is dense or a view of a packed buffer.
//
// Score tiles are 64 x 64 at every head dim; the head dim sets the width of the operand tiles
// and of the output accumulators. Past head dim 64 the backward's resident operands (Q and dO for
// dq, K and V for dk and dv) stay in shared memory and are read per product instead of being
// held in registers: with two 16 x 128 accumulators, that keeps a warp's live registers under
// the 255 a thread may have (ptxas reports no spills). The tiles live in dynamic shared memory,
// more than 48 KiB past head dim 64 (flash_shared_bytes).
#include <cmath>
#include <cstddef>
#include <iterator>
#include <mutex>
#include <set>
#include <type_traits>
#include <utility>

#include "core/cuda/cuda_check.h"
#include "core/cuda/flash_attention.h"
#include "core/cuda/kernel_math.cuh"
#include "core/cuda/mma_sm80.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kTile = 64;  // query rows per CTA and key rows per step (equal: the causal
                           // diagonal is one tile)
constexpr int kWarps = 4;
constexpr int kCtaThreads = kWarps * 32;
constexpr int kWarpRows = kTile / kWarps;  // 16: one m16 tile
constexpr int kScoreN8 = kTile / 8;        // n8 tiles across a score tile's 64 columns
constexpr int kScoreSteps = kTile / 16;    // k16 steps along a score tile (P, dS as A operands)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// What the head dim HD sets: the operand tiles' width and pitch, the products' k16 steps along
// the head dim, the output accumulators' n8 tiles.
template <int HD>
struct Head {
  static_assert(HD % 32 == 0 && HD >= kFlashHeadDim && HD <= kFlashHeadDimWide,
                "whole k16 steps and pairs of n8 tiles, at most 128 (the registers)");
  // Row pitch of the 16-bit tiles in shared memory: HD + 8 elements (144, 208 or 272 bytes: 36,
  // 52 or 68 words, 4, 20 or 4 banks apart modulo 32), so the 8 rows an ldmatrix reads start on 8
  // distinct multiples of 4 banks and hit all 32 banks once; rows stay 16-byte aligned for
  // cp.async and the 16-byte stores.
  static constexpr int kLd = HD + 8;
  static constexpr int kSteps = HD / 16;   // k16 steps along the head dim
  static constexpr int kN8 = HD / 8;       // n8 tiles across the head dim
  static constexpr int kVectors = HD / 8;  // 16-byte vectors in a row
  static constexpr int kTileElems = kTile * kLd;
  // The backward's resident operands in shared memory (read per product) rather than registers.
  static constexpr bool kResidentShared = HD > kFlashHeadDim;
};

// Float accumulators of a warp's 16 rows by N8 n8 tiles (C layout).
template <int N8>
using Acc = float[N8][4];

__device__ __forceinline__ int lane_id() {
  return threadIdx.x & 31;
}

template <int N8>
__device__ __forceinline__ void zero(Acc<N8>& acc) {
#pragma unroll
  for (int n = 0; n < N8; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[n][i] = 0.0f;
}

// An A operand of KS k16 steps (the warp's 16 rows) held in registers: step kk's fragment.
template <int KS>
struct RegisterA {
  unsigned a[KS][4];
  __device__ __forceinline__ void step(int kk, unsigned (&out)[4]) const {
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = a[kk][i];
  }
};

// The A fragment of k16 step kk of the warp's 16 rows of a shared tile of pitch LD: matrices
// (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15), which ldmatrix.x4 returns as
// out[0..3].
template <int LD, typename T>
__device__ __forceinline__ void ldmatrix_a(const T* rows, int kk, unsigned (&out)[4]) {
  const int lane = lane_id();
  ldmatrix_x4(out, rows + (lane % 16) * LD + kk * 16 + (lane / 16) * 8);
}

// An A operand left in shared memory (the warp's 16 rows of a tile of pitch LD), read per step.
template <int LD, typename T>
struct SharedA {
  const T* rows;
  __device__ __forceinline__ void step(int kk, unsigned (&out)[4]) const {
    ldmatrix_a<LD>(rows, kk, out);
  }
};

// The warp's 16 rows of a shared tile as an A operand of KS steps: in registers (loaded now, so
// the tile may be reused) or, kShared, read from the tile per product (it must stay).
template <bool kShared, int KS, int LD, typename T>
using WarpRowsA = std::conditional_t<kShared, SharedA<LD, T>, RegisterA<KS>>;

template <bool kShared, int KS, int LD, typename T>
__device__ WarpRowsA<kShared, KS, LD, T> warp_rows_a(const T* rows) {
  if constexpr (kShared) {
    return {rows};
  } else {
    RegisterA<KS> r;
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) ldmatrix_a<LD>(rows, kk, r.a[kk]);
    return r;
  }
}

// One (batch, head)'s rows of an operand: row i's hd elements from base + i * ld.
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

// Rows [row0, row0 + 64) of a (t, HD) matrix into a shared tile by cp.async (zeros past row t),
// by the whole CTA, 16 bytes a copy; the caller commits the group.
template <int HD, typename T>
__device__ void load_tile_async(Rows<const T> src, std::int64_t row0, std::int64_t t, T* dst) {
  using H = Head<HD>;
#pragma unroll
  for (int idx = threadIdx.x; idx < kTile * H::kVectors; idx += kCtaThreads) {
    const int r = idx / H::kVectors, c = (idx % H::kVectors) * 8;
    const bool valid = row0 + r < t;
    cp_async_16(dst + r * H::kLd + c, valid ? src.row(row0 + r) + c : src.base, valid);
  }
}

// The C fragments of two adjacent n8 tiles rounded to T: the A fragment of one k16 step.
template <typename T, int KS>
__device__ void to_a(const Acc<2 * KS>& c, RegisterA<KS>& a) {
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    a.a[kk][0] = pack_floats<T>(c[2 * kk][0], c[2 * kk][1]);
    a.a[kk][1] = pack_floats<T>(c[2 * kk][2], c[2 * kk][3]);
    a.a[kk][2] = pack_floats<T>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a.a[kk][3] = pack_floats<T>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
  }
}

// acc += A B for the warp's 16 rows: A (16 x 16 KS) from `a` (RegisterA or SharedA), B
// (16 KS x 8 N8) from a shared tile of pitch LD. kRowsAreN: B(k, n) = tile[n][k] (the tile's
// rows are the product's columns, as keys are in Q K^T): ldmatrix gives the B layout directly.
// Otherwise B(k, n) = tile[k][n] (values in P V), read transposed. Each ldmatrix.x4 feeds two n8
// tiles of one k16 step.
template <bool kRowsAreN, int KS, int LD, typename A, typename T, int N8>
__device__ void warp_product(const A& a, const T* tile, Acc<N8>& acc) {
  const int lane = lane_id();
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    unsigned af[4];
    a.step(kk, af);
#pragma unroll
    for (int p = 0; p < N8 / 2; ++p) {
      unsigned b[4];
      if constexpr (kRowsAreN) {  // matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, ...)
        ldmatrix_x4(
            b, tile + (p * 16 + (lane / 16) * 8 + lane % 8) * LD + kk * 16 + (lane / 8 % 2) * 8);
      } else {  // matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), ...
        ldmatrix_x4_trans(
            b, tile + (kk * 16 + (lane / 8 % 2) * 8 + lane % 8) * LD + p * 16 + (lane / 16) * 8);
      }
      const unsigned b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
      mma_m16n8k16<T>(acc[2 * p], af, b0);
      mma_m16n8k16<T>(acc[2 * p + 1], af, b1);
    }
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

// Writes the warp's 16 x HD accumulators, row r (0: lane / 4, + 8 for 1) times mul[r], rounded
// to T, to rows [row0, row0 + 16) of `dst`, skipping rows past t; staged in `staging` (16 rows of
// the tile pitch, the warp's own) for 16-byte stores.
template <int HD, typename T>
__device__ void store_warp_rows(const Acc<HD / 8>& acc, const float (&mul)[2], Rows<T> dst,
                                std::int64_t row0, std::int64_t t, T* staging) {
  using H = Head<HD>;
  const int lane = lane_id(), g = lane >> 2;
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int n = 0; n < H::kN8; ++n)
      *reinterpret_cast<unsigned*>(staging + (g + 8 * r) * H::kLd + c_col(n, 0)) =
          pack_floats<T>(acc[n][2 * r] * mul[r], acc[n][2 * r + 1] * mul[r]);
  __syncwarp();
#pragma unroll
  for (int idx = lane; idx < kWarpRows * H::kVectors; idx += 32) {
    const int r = idx / H::kVectors, c = (idx % H::kVectors) * 8;
    if (row0 + r < t)
      *reinterpret_cast<uint4*>(dst.row(row0 + r) + c) =
          *reinterpret_cast<const uint4*>(staging + r * H::kLd + c);
  }
}

// The tiles of a kernel's dynamic shared memory: `tiles` operand tiles of 64 rows at the head
// dim's pitch, then (stats) 64 floats of D and 64 of lse.
template <int HD, typename T>
constexpr std::size_t shared_bytes(int tiles, bool stats) {
  return std::size_t(tiles) * Head<HD>::kTileElems * sizeof(T) +
         (stats ? 2 * kTile * sizeof(float) : 0);
}
template <int HD, typename T>
struct SharedLayout {
  static constexpr int kForwardTiles = 4;  // K and V, double-buffered
  // + Q and dO (dq) or K and V (dk, dv) resident where the backward reads them from shared memory
  static constexpr int kBackwardTiles = Head<HD>::kResidentShared ? 6 : 4;
  static constexpr std::size_t kForward = shared_bytes<HD, T>(kForwardTiles, false);
  static constexpr std::size_t kBackward = shared_bytes<HD, T>(kBackwardTiles, true);
};

// Tile i of a kernel's dynamic shared memory `smem` (each kernel declares it, extern).
template <int HD, typename T>
__device__ T* shared_tile(unsigned char* smem, int i) {
  return reinterpret_cast<T*>(smem) + std::size_t(i) * Head<HD>::kTileElems;
}
// The D and lse floats after `tiles` tiles.
template <int HD, typename T>
__device__ float* shared_stats(unsigned char* smem, int tiles) {
  return reinterpret_cast<float*>(shared_tile<HD, T>(smem, tiles));
}

// Grid (B * H, query tiles); the last query tiles (the most key tiles) are launched first.
template <int HD, typename T>
__global__ void __launch_bounds__(kCtaThreads)
    flash_forward_kernel(const T* q_, const T* k_, const T* v_, T* o_, float* lse,
                         FlashGeometry geo) {
  using H = Head<HD>;
  extern __shared__ __align__(16) unsigned char smem[];
  T* const ks[2] = {shared_tile<HD, T>(smem, 0), shared_tile<HD, T>(smem, 1)};
  T* const vs[2] = {shared_tile<HD, T>(smem, 2), shared_tile<HD, T>(smem, 3)};
  const Rows<const T> q = rows_of(q_, geo.q, geo), k = kv_rows_of(k_, geo.k, geo),
                      v = kv_rows_of(v_, geo.v, geo);
  const std::int64_t t = geo.t;
  const float scale_log2 = geo.scale * kLog2e;
  const int qb = gridDim.y - 1 - blockIdx.y;
  const std::int64_t bh = blockIdx.x, q0 = std::int64_t(qb) * kTile;
  const int warp = threadIdx.x >> 5, g = lane_id() >> 2;
  const std::int64_t row0 = q0 + warp * kWarpRows;        // the warp's first query row
  const std::int64_t rows[2] = {row0 + g, row0 + g + 8};  // the lane's two rows

  // Q's tile through ks[1] (free until the second key tile) into registers, key tile 0 with it.
  load_tile_async<HD>(q, q0, t, ks[1]);
  load_tile_async<HD>(k, 0, t, ks[0]);
  load_tile_async<HD>(v, 0, t, vs[0]);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  const auto qa = warp_rows_a<false, H::kSteps, H::kLd>(ks[1] + warp * kWarpRows * H::kLd);
  __syncthreads();

  Acc<H::kN8> acc;
  zero(acc);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // l: this lane's part of the sum
  for (int kb = 0; kb <= qb; ++kb) {
    const int stage = kb & 1;
    if (kb < qb) {  // the next key tile loads while this one is multiplied
      const std::int64_t next = std::int64_t(kb + 1) * kTile;
      load_tile_async<HD>(k, next, t, ks[stage ^ 1]);
      load_tile_async<HD>(v, next, t, vs[stage ^ 1]);
    }
    cp_async_commit();
    cp_async_wait<1>();  // all but the group just issued: tile kb is here
    __syncthreads();
    Acc<kScoreN8> s;
    zero(s);
    warp_product<true, H::kSteps, H::kLd>(qa, ks[stage], s);  // S = Q K^T
    // Only the diagonal tile is masked: earlier key tiles are whole and before every row. Key 0
    // is unmasked for every row, so m is finite from the first tile on.
    const std::int64_t k0 = std::int64_t(kb) * kTile;
#pragma unroll
    for (int n = 0; n < kScoreN8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        s[n][i] = (kb < qb || k0 + c_col(n, i) <= rows[i >> 1]) ? s[n][i] * scale_log2 : -INFINITY;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < kScoreN8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
      const float m_new = fmaxf(m[r], quad_max(mx));
      const float correction = exp2f(m[r] - m_new);  // 0 on the first tile (m = -inf)
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kScoreN8; ++n)
#pragma unroll
        for (int i = 2 * r; i < 2 * r + 2; ++i) {
          s[n][i] = exp2f(s[n][i] - m_new);
          sum += s[n][i];
        }
#pragma unroll
      for (int n = 0; n < H::kN8; ++n)
#pragma unroll
        for (int i = 2 * r; i < 2 * r + 2; ++i) acc[n][i] *= correction;
      l[r] = l[r] * correction + sum;
      m[r] = m_new;
    }
    RegisterA<kScoreSteps> pa;
    to_a<T>(s, pa);
    warp_product<false, kScoreSteps, H::kLd>(pa, vs[stage], acc);  // O += P V
    __syncthreads();  // every warp is done with this stage before it is loaded again
  }
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = quad_sum(l[r]);
    inv[r] = 1.0f / l[r];
    if ((lane_id() & 3) == 0 && rows[r] < t) lse[bh * t + rows[r]] = (m[r] + log2f(l[r])) * kLn2;
  }
  store_warp_rows<HD>(acc, inv, rows_of(o_, geo.o, geo), row0, t,
                      ks[0] + warp * kWarpRows * H::kLd);
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
// for rows past t): a thread pair per row (lane ^ 1), each taking half of its HD dims in 16-byte
// vectors, o from device memory, dO from its shared tile. `lse` starts at the (batch, head).
template <int HD, typename T>
__device__ void tile_row_stats(Rows<const T> o, const T* do_tile, const float* lse, std::int64_t q0,
                               std::int64_t t, float* d_s, float* lse_s) {
  const int row = threadIdx.x >> 1, half = threadIdx.x & 1;
  const std::int64_t qi = q0 + row;
  const bool valid = qi < t;
  float s = 0.0f;
  if (valid) {
#pragma unroll
    for (int u = 0; u < HD / 16; ++u) {
      const int c = half * (HD / 2) + u * 8;
      const uint4 a = *reinterpret_cast<const uint4*>(o.row(qi) + c);
      const uint4 b = *reinterpret_cast<const uint4*>(do_tile + row * Head<HD>::kLd + c);
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
// Grid as the forward's; Q's and dO's rows stay (in registers, or in shared memory at head dim
// 128), K and V stream.
template <int HD, typename T>
__global__ void __launch_bounds__(kCtaThreads)
    flash_backward_dq_kernel(const T* q_, const T* k_, const T* v_, const T* o_, const T* dout_,
                             const float* lse, T* dq_, FlashGeometry geo) {
  using H = Head<HD>;
  extern __shared__ __align__(16) unsigned char smem[];
  using L = SharedLayout<HD, T>;
  T* const ks[2] = {shared_tile<HD, T>(smem, 0), shared_tile<HD, T>(smem, 1)};
  T* const vs[2] = {shared_tile<HD, T>(smem, 2), shared_tile<HD, T>(smem, 3)};
  // Q's and dO's tiles: through stage 1 (free until the second key tile) into registers, or
  // resident in tiles 4 and 5.
  T* const q_tile = H::kResidentShared ? shared_tile<HD, T>(smem, 4) : ks[1];
  T* const do_tile = H::kResidentShared ? shared_tile<HD, T>(smem, 5) : vs[1];
  float* const d_s = shared_stats<HD, T>(smem, L::kBackwardTiles);
  float* const lse_s = d_s + kTile;
  const Rows<const T> q = rows_of(q_, geo.q, geo), k = kv_rows_of(k_, geo.k, geo),
                      v = kv_rows_of(v_, geo.v, geo), dout = rows_of(dout_, geo.dout, geo);
  const std::int64_t t = geo.t;
  const float scale = geo.scale, scale_log2 = geo.scale * kLog2e;
  const int qb = gridDim.y - 1 - blockIdx.y;
  const std::int64_t bh = blockIdx.x, q0 = std::int64_t(qb) * kTile;
  const int warp = threadIdx.x >> 5, g = lane_id() >> 2;
  const std::int64_t row0 = q0 + warp * kWarpRows;
  const std::int64_t rows[2] = {row0 + g, row0 + g + 8};

  load_tile_async<HD>(q, q0, t, q_tile);
  load_tile_async<HD>(dout, q0, t, do_tile);
  load_tile_async<HD>(k, 0, t, ks[0]);
  load_tile_async<HD>(v, 0, t, vs[0]);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  tile_row_stats<HD>(rows_of(o_, geo.o, geo), do_tile, lse + bh * t, q0, t, d_s, lse_s);
  const auto qa =
      warp_rows_a<H::kResidentShared, H::kSteps, H::kLd>(q_tile + warp * kWarpRows * H::kLd);
  const auto doa =
      warp_rows_a<H::kResidentShared, H::kSteps, H::kLd>(do_tile + warp * kWarpRows * H::kLd);
  __syncthreads();
  float d_row[2], lse_row[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    d_row[r] = d_s[warp * kWarpRows + g + 8 * r];
    lse_row[r] = lse_s[warp * kWarpRows + g + 8 * r];
  }

  Acc<H::kN8> dqacc;
  zero(dqacc);
  for (int kb = 0; kb <= qb; ++kb) {
    const int stage = kb & 1;
    if (kb < qb) {
      const std::int64_t next = std::int64_t(kb + 1) * kTile;
      load_tile_async<HD>(k, next, t, ks[stage ^ 1]);
      load_tile_async<HD>(v, next, t, vs[stage ^ 1]);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const std::int64_t k0 = std::int64_t(kb) * kTile;
    Acc<kScoreN8> p;
    zero(p);
    warp_product<true, H::kSteps, H::kLd>(qa, ks[stage], p);  // S = Q K^T, then P in place
#pragma unroll
    for (int n = 0; n < kScoreN8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const std::int64_t row = rows[i >> 1];
        p[n][i] = (row < t && (kb < qb || k0 + c_col(n, i) <= row))
                      ? exp2f(p[n][i] * scale_log2 - lse_row[i >> 1])
                      : 0.0f;
      }
    Acc<kScoreN8> ds;
    zero(ds);
    warp_product<true, H::kSteps, H::kLd>(doa, vs[stage], ds);  // dP = dO V^T, then dS in place
#pragma unroll
    for (int n = 0; n < kScoreN8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) ds[n][i] = p[n][i] * (ds[n][i] - d_row[i >> 1]);
    RegisterA<kScoreSteps> dsa;
    to_a<T>(ds, dsa);
    warp_product<false, kScoreSteps, H::kLd>(dsa, ks[stage], dqacc);  // dQ += dS K
    __syncthreads();  // every warp is done with this stage before it is loaded again
  }
  const float mul[2] = {scale, scale};
  store_warp_rows<HD>(dqacc, mul, rows_of(dq_, geo.dq, geo), row0, t,
                      ks[0] + warp * kWarpRows * H::kLd);
}

// Per key tile of a kv head: dv = P^T dO and dk = scale * dS^T Q over the query tiles at or after
// it, of each query head of the head's group in turn (one loop over (head, query tile), so the
// loads stay double-buffered across heads). The warp's 16 keys are the rows of its products
// (S^T = K Q^T, dP^T = V dO^T), K's and V's rows in registers (or in shared memory at head dim
// 128); Q and dO stream. Grid (B * H / group, key tiles); key tile 0, with the most query tiles,
// first.
template <int HD, typename T>
__global__ void __launch_bounds__(kCtaThreads)
    flash_backward_dkdv_kernel(const T* q_, const T* k_, const T* v_, const T* o_, const T* dout_,
                               const float* lse, T* dk_, T* dv_, FlashGeometry geo) {
  using H = Head<HD>;
  extern __shared__ __align__(16) unsigned char smem[];
  using L = SharedLayout<HD, T>;
  T* const qs[2] = {shared_tile<HD, T>(smem, 0), shared_tile<HD, T>(smem, 1)};
  T* const dos[2] = {shared_tile<HD, T>(smem, 2), shared_tile<HD, T>(smem, 3)};
  T* const k_tile = H::kResidentShared ? shared_tile<HD, T>(smem, 4) : qs[1];
  T* const v_tile = H::kResidentShared ? shared_tile<HD, T>(smem, 5) : dos[1];
  float* const d_s = shared_stats<HD, T>(smem, L::kBackwardTiles);
  float* const lse_s = d_s + kTile;
  const std::int64_t kv_heads = geo.H / geo.group;
  const std::int64_t b = blockIdx.x / kv_heads, kvh = blockIdx.x % kv_heads;
  const Rows<const T> k = head_rows(k_, geo.k, b, kvh), v = head_rows(v_, geo.v, b, kvh);
  const std::int64_t t = geo.t;
  const float scale = geo.scale, scale_log2 = geo.scale * kLog2e;
  const int kb = blockIdx.y;
  const std::int64_t k0 = std::int64_t(kb) * kTile;
  const int warp = threadIdx.x >> 5, g = lane_id() >> 2;
  const std::int64_t row0 = k0 + warp * kWarpRows;
  // The lane's two key rows, and the query rows compared with them, in 32 bits (t is under 65535
  // tiles of 64: flash_attention_applies): at head dim 128 the registers this saves are what kept
  // dk/dv, at the 255 a thread may have, from spilling.
  const int keys[2] = {int(row0) + g, int(row0) + g + 8};
  // Step s: query head kvh * group + s / tiles, query tile kb + s % tiles.
  const int tiles = static_cast<int>((t + kTile - 1) / kTile) - kb;
  const int steps = static_cast<int>(geo.group) * tiles;
  auto head_of = [&](int s) { return kvh * geo.group + s / tiles; };
  auto tile_of = [&](int s) { return kb + s % tiles; };

  load_tile_async<HD>(k, k0, t, k_tile);
  load_tile_async<HD>(v, k0, t, v_tile);
  load_tile_async<HD>(head_rows(q_, geo.q, b, head_of(0)), k0, t, qs[0]);
  load_tile_async<HD>(head_rows(dout_, geo.dout, b, head_of(0)), k0, t, dos[0]);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  const auto ka =
      warp_rows_a<H::kResidentShared, H::kSteps, H::kLd>(k_tile + warp * kWarpRows * H::kLd);
  const auto va =
      warp_rows_a<H::kResidentShared, H::kSteps, H::kLd>(v_tile + warp * kWarpRows * H::kLd);
  __syncthreads();

  Acc<H::kN8> dkacc, dvacc;
  zero(dkacc);
  zero(dvacc);
  for (int step = 0; step < steps; ++step) {
    const int stage = step & 1;
    if (step + 1 < steps) {
      const std::int64_t next = std::int64_t(tile_of(step + 1)) * kTile, h = head_of(step + 1);
      load_tile_async<HD>(head_rows(q_, geo.q, b, h), next, t, qs[stage ^ 1]);
      load_tile_async<HD>(head_rows(dout_, geo.dout, b, h), next, t, dos[stage ^ 1]);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const int qb = tile_of(step);
    const std::int64_t q0 = std::int64_t(qb) * kTile, h = head_of(step);
    tile_row_stats<HD>(head_rows(o_, geo.o, b, h), dos[stage], lse + (b * geo.H + h) * t, q0, t,
                       d_s, lse_s);
    __syncthreads();
    Acc<kScoreN8> p;
    zero(p);
    warp_product<true, H::kSteps, H::kLd>(ka, qs[stage], p);  // S^T = K Q^T, then P^T in place
#pragma unroll
    for (int n = 0; n < kScoreN8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int col = c_col(n, i);
        const int qi = int(q0) + col;
        p[n][i] = (qi < t && (qb > kb || keys[i >> 1] <= qi))
                      ? exp2f(p[n][i] * scale_log2 - lse_s[col])
                      : 0.0f;
      }
    RegisterA<kScoreSteps> pa;
    to_a<T>(p, pa);
    warp_product<false, kScoreSteps, H::kLd>(pa, dos[stage], dvacc);  // dV += P^T dO
    Acc<kScoreN8> ds;
    zero(ds);
    warp_product<true, H::kSteps, H::kLd>(va, dos[stage], ds);  // dP^T = V dO^T, dS^T in place
#pragma unroll
    for (int n = 0; n < kScoreN8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) ds[n][i] = p[n][i] * (ds[n][i] - d_s[c_col(n, i)]);
    RegisterA<kScoreSteps> dsa;
    to_a<T>(ds, dsa);
    warp_product<false, kScoreSteps, H::kLd>(dsa, qs[stage], dkacc);  // dK += dS^T Q
    __syncthreads();  // every warp is done with this stage, d_s and lse_s
  }
  const float mul_dk[2] = {scale, scale}, mul_dv[2] = {1.0f, 1.0f};
  // The loop's last barrier freed both stages: each warp stages its own 16 rows there.
  store_warp_rows<HD>(dkacc, mul_dk, head_rows(dk_, geo.dk, b, kvh), row0, t,
                      qs[0] + warp * kWarpRows * H::kLd);
  store_warp_rows<HD>(dvacc, mul_dv, head_rows(dv_, geo.dv, b, kvh), row0, t,
                      dos[0] + warp * kWarpRows * H::kLd);
}

// (heads, tiles): heads = B * H for the query heads' kernels, B * H / group for dk and dv.
dim3 tile_grid(const FlashGeometry& g, std::int64_t heads) {
  return dim3(static_cast<unsigned>(heads), static_cast<unsigned>((g.t + kTile - 1) / kTile));
}

// A kernel's opt-in to `bytes` of dynamic shared memory where that is above the 48 KiB every
// kernel may have: once per kernel and device (the attribute is the device context's).
void allow_shared_bytes(const void* kernel, std::size_t bytes) {
  if (bytes <= 48 * 1024) return;
  int device = 0;
  FSDP_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> allowed;
  const std::lock_guard lock(mutex);
  if (allowed.contains({kernel, device})) return;
  FSDP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes)));
  allowed.insert({kernel, device});
}

template <int HD, typename T>
void forward_at(const T* q, const T* k, const T* v, T* o, float* lse, const FlashGeometry& g,
                cudaStream_t stream) {
  constexpr std::size_t bytes = SharedLayout<HD, T>::kForward;
  allow_shared_bytes(reinterpret_cast<const void*>(&flash_forward_kernel<HD, T>), bytes);
  flash_forward_kernel<HD, T>
      <<<tile_grid(g, g.B * g.H), kCtaThreads, bytes, stream>>>(q, k, v, o, lse, g);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <int HD, typename T>
void backward_at(const T* q, const T* k, const T* v, const T* o, const T* dout, const float* lse,
                 T* dq, T* dk, T* dv, const FlashGeometry& g, cudaStream_t stream) {
  constexpr std::size_t bytes = SharedLayout<HD, T>::kBackward;
  allow_shared_bytes(reinterpret_cast<const void*>(&flash_backward_dkdv_kernel<HD, T>), bytes);
  allow_shared_bytes(reinterpret_cast<const void*>(&flash_backward_dq_kernel<HD, T>), bytes);
  flash_backward_dkdv_kernel<HD, T>
      <<<tile_grid(g, g.B * g.H / g.group), kCtaThreads, bytes, stream>>>(q, k, v, o, dout, lse, dk,
                                                                          dv, g);
  FSDP_CUDA_CHECK_LAUNCH();
  flash_backward_dq_kernel<HD, T>
      <<<tile_grid(g, g.B * g.H), kCtaThreads, bytes, stream>>>(q, k, v, o, dout, lse, dq, g);
  FSDP_CUDA_CHECK_LAUNCH();
}

}  // namespace

// f.template operator()<HD>() with HD = hd, one of kFlashHeadDims; false for any other hd.
template <typename F>
bool with_head_dim(std::int64_t hd, F&& f) {
  switch (hd) {
    case 64:
      f.template operator()<64>();
      return true;
    case 96:
      f.template operator()<96>();
      return true;
    case 128:
      f.template operator()<128>();
      return true;
  }
  return false;
}
static_assert(std::size(kFlashHeadDims) == 3 && kFlashHeadDims[1] == 96, "with_head_dim's cases");

bool flash_attention_applies(const FlashGeometry& g, std::initializer_list<const void*> pointers) {
  if (!with_head_dim(g.hd, []<int>() {}) || g.group < 1 || g.H % g.group != 0 ||
      g.B * g.H > 0x7fffffff || (g.t + kTile - 1) / kTile > 65535)
    return false;
  for (const void* p : pointers)
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  // Every row's start 16-byte aligned too: strides of whole 16-byte vectors of 16-bit elements.
  for (const AttentionOperandStrides& s : {g.q, g.k, g.v, g.o, g.dout, g.dq, g.dk, g.dv})
    if (s.batch % 8 != 0 || s.head % 8 != 0 || s.row % 8 != 0) return false;
  return true;
}

FlashSharedBytes flash_shared_bytes(std::int64_t hd) {
  FlashSharedBytes bytes{};  // both 16-bit types take the same bytes
  with_head_dim(hd, [&]<int HD>() {
    using L = SharedLayout<HD, __nv_bfloat16>;
    bytes = {L::kForward, L::kBackward, L::kBackward};
  });
  return bytes;
}

template <typename T>
void flash_attention_forward(const T* q, const T* k, const T* v, T* o, float* lse,
                             const FlashGeometry& g, cudaStream_t stream) {
  with_head_dim(g.hd, [&]<int HD>() { forward_at<HD>(q, k, v, o, lse, g, stream); });
}

template <typename T>
void flash_attention_backward(const T* q, const T* k, const T* v, const T* o, const T* dout,
                              const float* lse, T* dq, T* dk, T* dv, const FlashGeometry& g,
                              cudaStream_t stream) {
  with_head_dim(g.hd,
                [&]<int HD>() { backward_at<HD>(q, k, v, o, dout, lse, dq, dk, dv, g, stream); });
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
