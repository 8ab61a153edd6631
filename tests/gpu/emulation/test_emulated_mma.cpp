// emu_mma.h's instructions (core/cuda/mma_sm80.cuh on the host) against the PTX ISA's fragment
// layouts written out here independently, every element distinct so that a wrong lane, register
// or half fails: ldmatrix x4, x4.trans and x2 word by word; mma.m16n8k16 (bf16 and fp16) with
// fragments built by the layout formulas and again through ldmatrix, against a double loop
// (integer values: every sum exact in float); cp.async's groups completed by wait_group, zero
// fill.
// (emu_cuda.h supplies the functions, as it does for the rewritten .cu files.)
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <tuple>
#include <vector>

#include "tests/gpu/emulation/emu_cuda.h"
#include "tests/gpu/emulation/emu_test_runtime.h"

namespace {

using fsdp::emu::launch;
using fsdp::emu::test::take_fault;

// Element (row r, column c) of 8x8 matrix m in the ldmatrix test: distinct, never 0.
unsigned short ld_value(int m, int r, int c) {
  return static_cast<unsigned short>(1 + m * 64 + r * 8 + c);
}

// Four 8x8 matrices (src: matrix m's row r at (m * 8 + r) * 8) copied to shared memory rows in
// reverse order, so each lane's address is not simply its index. out[(l * 10) + i]: x4's four
// words, x4.trans's four, x2's two.
__global__ void ldmatrix_words(const unsigned short* src, unsigned* out) {
  __shared__ __align__(16) unsigned short tile[32 * 8];
  const int l = threadIdx.x;
  for (int i = 0; i < 8; ++i) tile[(31 - l) * 8 + i] = src[l * 8 + i];
  __syncwarp();
  const unsigned short* row = tile + (31 - l) * 8;  // matrix l / 8, row l % 8
  unsigned r4[4], t4[4], r2[2];
  fsdp::cuda::ldmatrix_x4(r4, row);
  fsdp::cuda::ldmatrix_x4_trans(t4, row);
  fsdp::cuda::ldmatrix_x2(r2, row);
  for (int i = 0; i < 4; ++i) out[l * 10 + i] = r4[i];
  for (int i = 0; i < 4; ++i) out[l * 10 + 4 + i] = t4[i];
  for (int i = 0; i < 2; ++i) out[l * 10 + 8 + i] = r2[i];
}

// D = A (16 x 16) B (16 x 8) + C with A, B as 16-bit bits (row-major, B k by n) and C, D float
// (16 x 8 row-major). d_direct from fragments built by the layout formulas, d_ldmatrix from
// fragments loaded from shared memory (A by x4, B by x4.trans over B's two 8-row halves twice).
template <typename T>
__global__ void mma_product(const unsigned short* a, const unsigned short* b, const float* c,
                            float* d_direct, float* d_ldmatrix) {
  __shared__ __align__(16) unsigned short as[16 * 16];
  __shared__ __align__(16) unsigned short bs[16 * 8];
  const int l = threadIdx.x, g = l >> 2, q = l & 3;
  for (int i = l; i < 16 * 16; i += 32) as[i] = a[i];
  for (int i = l; i < 16 * 8; i += 32) bs[i] = b[i];
  __syncwarp();
  auto word = [](unsigned short lo, unsigned short hi) { return lo | unsigned(hi) << 16; };
  auto a_at = [&](int r, int k) { return a[r * 16 + k]; };
  auto b_at = [&](int k, int n) { return b[k * 8 + n]; };
  const unsigned af[4] = {word(a_at(g, 2 * q), a_at(g, 2 * q + 1)),
                          word(a_at(g + 8, 2 * q), a_at(g + 8, 2 * q + 1)),
                          word(a_at(g, 2 * q + 8), a_at(g, 2 * q + 9)),
                          word(a_at(g + 8, 2 * q + 8), a_at(g + 8, 2 * q + 9))};
  const unsigned bf[2] = {word(b_at(2 * q, g), b_at(2 * q + 1, g)),
                          word(b_at(2 * q + 8, g), b_at(2 * q + 9, g))};
  float acc[4], acc2[4];
  for (int i = 0; i < 4; ++i) {
    acc[i] = c[(g + 8 * (i >> 1)) * 8 + 2 * q + (i & 1)];
    acc2[i] = acc[i];
  }
  fsdp::cuda::mma_m16n8k16<T>(acc, af, bf);
  // A: matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
  unsigned al[4], bl4[4];
  fsdp::cuda::ldmatrix_x4(al, as + (l % 16) * 16 + (l / 16) * 8);
  // B's rows k 0-7 and 8-15, transposed, twice (x4 with matrices 2 and 3 repeating 0 and 1).
  fsdp::cuda::ldmatrix_x4_trans(bl4, bs + (l % 16) * 8);
  const unsigned bl[2] = {bl4[0], bl4[1]};
  fsdp::cuda::mma_m16n8k16<T>(acc2, al, bl);
  for (int i = 0; i < 4; ++i) {
    d_direct[(g + 8 * (i >> 1)) * 8 + 2 * q + (i & 1)] = acc[i];
    d_ldmatrix[(g + 8 * (i >> 1)) * 8 + 2 * q + (i & 1)] = acc2[i];
  }
}

// Each thread copies 16 bytes in each of two groups (the second zero-filled for odd threads),
// reading its destinations, set to 0xff bytes first, after wait_group 1 and after wait_group 0:
// seen[t * 3 + 0] the first group's word after wait 1, [+ 1] the second's then, [+ 2] the
// second's after wait 0.
__global__ void cp_async_groups(const unsigned* src, unsigned* seen) {
  __shared__ __align__(16) unsigned dst[2][32 * 4];
  const int l = threadIdx.x;
  for (int i = 0; i < 4; ++i) dst[0][l * 4 + i] = dst[1][l * 4 + i] = 0xffffffffu;
  fsdp::cuda::cp_async_16(&dst[0][l * 4], src + l * 4, true);
  fsdp::cuda::cp_async_commit();
  fsdp::cuda::cp_async_16(&dst[1][l * 4], src + 128 + l * 4, l % 2 == 0);
  fsdp::cuda::cp_async_commit();
  fsdp::cuda::cp_async_wait<1>();
  seen[l * 3 + 0] = dst[0][l * 4 + 1];
  seen[l * 3 + 1] = dst[1][l * 4 + 1];
  fsdp::cuda::cp_async_wait<0>();
  seen[l * 3 + 2] = dst[1][l * 4 + 1];
}

// 16-bit bits of small integers (exact in bf16 up to 256 and fp16 up to 2048).
template <typename T>
unsigned short bits_of(int v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat16_as_ushort(__float2bfloat16_rn(float(v)));
  else
    return __half_as_ushort(__float2half_rn(float(v)));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(emulated_mma)

BOOST_AUTO_TEST_CASE(ldmatrix_gives_each_lane_the_ptx_layouts_words) {
  std::vector<unsigned short> src(32 * 8);
  for (int m = 0; m < 4; ++m)
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 8; ++c) src[(m * 8 + r) * 8 + c] = ld_value(m, r, c);
  std::vector<unsigned> out(32 * 10, 0);
  launch([](auto... a) { ldmatrix_words(a...); }, "ldmatrix_words",
         FSDP_EMU_KERNEL_ADDRESS(ldmatrix_words), 1, 32)(src.data(), out.data());
  BOOST_TEST(take_fault() == "");
  auto word = [](unsigned short lo, unsigned short hi) { return lo | unsigned(hi) << 16; };
  for (int l = 0; l < 32; ++l)
    for (int m = 0; m < 4; ++m) {
      const int r = l / 4, c = 2 * (l % 4);
      BOOST_TEST(out[l * 10 + m] == word(ld_value(m, r, c), ld_value(m, r, c + 1)),
                 "x4 lane " << l << " matrix " << m);
      BOOST_TEST(out[l * 10 + 4 + m] == word(ld_value(m, c, r), ld_value(m, c + 1, r)),
                 "x4.trans lane " << l << " matrix " << m);
      if (m < 2)
        BOOST_TEST(out[l * 10 + 8 + m] == word(ld_value(m, r, c), ld_value(m, r, c + 1)),
                   "x2 lane " << l << " matrix " << m);
    }
}

// The emulation holds a group's copies until a wait completes it (on a device they may land any
// time before): a kernel that reads a tile still in flight reads what was there.
BOOST_AUTO_TEST_CASE(cp_async_lands_when_a_wait_completes_its_group_zeros_where_invalid) {
  std::vector<unsigned> src(256), seen(32 * 3, 0);
  for (unsigned i = 0; i < 256; ++i) src[i] = 1000 + i;
  launch([](auto... a) { cp_async_groups(a...); }, "cp_async_groups",
         FSDP_EMU_KERNEL_ADDRESS(cp_async_groups), 1, 32)(src.data(), seen.data());
  BOOST_TEST(take_fault() == "");
  for (unsigned l = 0; l < 32; ++l) {
    BOOST_TEST(seen[l * 3 + 0] == 1000 + l * 4 + 1, "first group after wait 1, thread " << l);
    BOOST_TEST(seen[l * 3 + 1] == 0xffffffffu, "second group after wait 1, thread " << l);
    BOOST_TEST(seen[l * 3 + 2] == (l % 2 == 0 ? 1000 + 128 + l * 4 + 1 : 0u),
               "second group after wait 0, thread " << l);
  }
}

using Types16 = std::tuple<__nv_bfloat16, __half>;

BOOST_AUTO_TEST_CASE_TEMPLATE(mma_m16n8k16_matches_a_double_loop, T, Types16) {
  std::vector<int> a(16 * 16), b(16 * 8);
  std::vector<float> c(16 * 8);
  for (int i = 0; i < 16 * 16; ++i) a[i] = i - 128;  // distinct, -128..127
  for (int i = 0; i < 16 * 8; ++i) b[i] = 63 - i;    // distinct, -64..63
  for (int i = 0; i < 16 * 8; ++i) c[i] = 0.5f + float(i);
  std::vector<unsigned short> ab(a.size()), bb(b.size());
  for (std::size_t i = 0; i < a.size(); ++i) ab[i] = bits_of<T>(a[i]);
  for (std::size_t i = 0; i < b.size(); ++i) bb[i] = bits_of<T>(b[i]);
  std::vector<float> direct(16 * 8, NAN), loaded(16 * 8, NAN);
  launch([](auto... x) { mma_product<T>(x...); }, "mma_product",
         FSDP_EMU_KERNEL_ADDRESS(mma_product<T>), 1,
         32)(ab.data(), bb.data(), c.data(), direct.data(), loaded.data());
  BOOST_TEST(take_fault() == "");
  for (int i = 0; i < 16; ++i)
    for (int n = 0; n < 8; ++n) {
      double ref = c[i * 8 + n];
      for (int k = 0; k < 16; ++k) ref += double(a[i * 16 + k]) * b[k * 8 + n];
      BOOST_TEST(direct[i * 8 + n] == ref, "direct fragments, D(" << i << ", " << n << ")");
      BOOST_TEST(loaded[i * 8 + n] == ref, "ldmatrix fragments, D(" << i << ", " << n << ")");
    }
}

BOOST_AUTO_TEST_SUITE_END()
