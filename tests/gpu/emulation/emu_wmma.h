// nvcuda::wmma on the host, for emu_cuda.h: every lane holds the whole 16x16 tile (the kernels
// treat fragments as opaque, so their register layout cannot matter), loads and products run per
// lane, lane 0 stores. The documented semantics: row_major element (r, c) at p[r * ldm + c],
// col_major at p[c * ldm + r]; products accumulate in float.
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

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

int emulated_lane();
void emulated_syncwarp();

inline float emulated_value(float v) {
  return v;
}
inline float emulated_value(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename Use, typename T, typename Layout, typename P>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const P* p, unsigned ldm) {
  for (unsigned r = 0; r < 16; ++r)
    for (unsigned c = 0; c < 16; ++c)
      f.x[r][c] =
          emulated_value(std::is_same_v<Layout, col_major> ? p[c * ldm + r] : p[r * ldm + c]);
}

inline void fill_fragment(fragment<accumulator, 16, 16, 16, float>& f, float v) {
  for (auto& row : f.x)
    for (float& e : row) e = v;
}

template <typename La, typename Lb>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, La>& a,
              const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, Lb>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  fragment<accumulator, 16, 16, 16, float> out;
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      float s = c.x[r][n];
      for (int k = 0; k < 16; ++k) s += a.x[r][k] * b.x[k][n];
      out.x[r][n] = s;
    }
  d = out;
}

// Lane 0 writes once every lane has passed: a lane still loading the old contents is not
// overwritten under it (on the device each lane writes its own elements).
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ldm, layout_t) {
  emulated_syncwarp();
  if (emulated_lane() == 0)
    for (unsigned r = 0; r < 16; ++r)
      for (unsigned c = 0; c < 16; ++c) p[r * ldm + c] = f.x[r][c];
}

}  // namespace nvcuda::wmma
