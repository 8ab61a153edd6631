// nvcuda::wmma on the host, for emu_cuda.h. The _sync operations are warp-collective, as on the
// device: each is a warp barrier named after it (divergent lanes are a fault), and the warp's
// work is done once, by lane 0 on its own fragments, which hold whole 16x16 tiles. The kernels
// treat fragments as opaque, so no register layout can matter, and lane 0's fragments are the
// ones its stores write; the other lanes' stay unset. A load completes before any lane goes on
// (a second barrier: the device reads the whole tile in the one instruction); a store does not
// (readers need a __syncwarp, as on the device). The documented semantics: row_major element
// (r, c) at p[r * ldm + c], col_major at p[c * ldm + r]; products accumulate in float.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "tests/gpu/emulation/emu_executor.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulation has the 16x16x16 shape only");
  float x[16][16];
};

inline float emulated_value(float v) {
  return v;
}
inline float emulated_value(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
inline float emulated_value(__half v) {
  return __half2float(v);
}

// Every lane arrives at `op`; true in the lane that does the warp's work.
inline bool emulated_collective(const char* op) {
  fsdp::emu::sync_warp(0xffffffffu, op);
  return fsdp::emu::lane() == 0;
}

template <typename Use, typename T, typename Layout, typename P>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const P* p, unsigned ldm) {
  if (emulated_collective("wmma::load_matrix_sync"))
    for (unsigned r = 0; r < 16; ++r)
      for (unsigned c = 0; c < 16; ++c)
        f.x[r][c] =
            emulated_value(std::is_same_v<Layout, col_major> ? p[c * ldm + r] : p[r * ldm + c]);
  fsdp::emu::sync_warp(0xffffffffu, "wmma::load_matrix_sync");
}

// Not a _sync operation on the device either: each lane fills its own fragment.
inline void fill_fragment(fragment<accumulator, 16, 16, 16, float>& f, float v) {
  for (auto& row : f.x)
    for (float& e : row) e = v;
}

// The 16-bit operand types wmma multiplies into float accumulators (bf16 and fp16; A's and B's
// the same, as on the device).
template <typename T>
concept emulated_16bit = std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;

template <emulated_16bit T, typename La, typename Lb>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, T, La>& a,
              const fragment<matrix_b, 16, 16, 16, T, Lb>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  if (!emulated_collective("wmma::mma_sync")) return;
  fragment<accumulator, 16, 16, 16, float> out;
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      float s = c.x[r][n];
      for (int k = 0; k < 16; ++k) s += a.x[r][k] * b.x[k][n];
      out.x[r][n] = s;
    }
  d = out;
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ldm, layout_t layout) {
  if (emulated_collective("wmma::store_matrix_sync"))
    for (unsigned r = 0; r < 16; ++r)
      for (unsigned c = 0; c < 16; ++c)
        p[layout == mem_row_major ? r * ldm + c : c * ldm + r] = f.x[r][c];
}

}  // namespace nvcuda::wmma
