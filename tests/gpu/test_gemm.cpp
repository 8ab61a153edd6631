// cuBLASLt products (core/cuda/gemm.h) against the CPU's matmul/bmm/linear: fp32, TF32, bf16 and
// fp16, every transpose pair, strided batches, padded leading dims, and the bias and bias+GELU
// epilogues; 1, odd and GPT-2 sizes. Outputs are NaN-poisoned first (beta = 0 must not read C).
// The heuristic's answers kept per problem.
#define BOOST_TEST_MODULE gpu_gemm
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda/gemm.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "tests/gpu/gpu_test_support.h"

using namespace fsdp;
using namespace fsdp::cuda;
using namespace fsdp::cuda::testing;
using bf16 = __nv_bfloat16;
using fp16 = __half;

BOOST_TEST_GLOBAL_FIXTURE(RequireDevice);

namespace {

Tensor cpu(const std::vector<float>& v, const Shape& shape) {
  return from_vector(std::vector<double>(v.begin(), v.end()), shape);
}

struct Case {
  std::int64_t m, n, k;
};
const std::vector<Case> kShapes = {{1, 1, 1}, {7, 13, 5}, {129, 65, 33}, {64, 768, 3072}};

const char* name(GemmPrecision p) {
  constexpr const char* kNames[] = {"fp32", "tf32", "bf16", "fp16"};
  return kNames[int(p)];
}
// Rounds to TF32's 10-bit mantissa (nearest): the tensor cores may truncate or round their
// inputs, so exact TF32 inputs keep the check on the product and its float accumulation.
std::vector<float> tf32(std::vector<float> v) {
  for (float& x : v) {
    std::uint32_t bits;
    std::memcpy(&bits, &x, 4);
    bits = (bits + 0x1000u) & ~0x1fffu;
    std::memcpy(&x, &bits, 4);
  }
  return v;
}

double tol(GemmPrecision p) {
  constexpr double kTols[] = {kTolFp32, kTolTf32, kTolBf16, kTolFp16};
  return kTols[int(p)];
}

// Runs one product with T storage and compares it with the CPU's: C = op(A) op(B) [+ bias]
// [-> gelu], batch entries apart by their dense sizes (+ a gap, so strides are really used).
template <typename T>
void check(Gemm& gemm, GemmPrecision precision, const Case& s, bool ta, bool tb, std::int64_t batch,
           GemmEpilogue epilogue) {
  const std::int64_t gap = batch > 1 ? 3 : 0;
  const std::int64_t sa = s.m * s.k + gap, sb = s.k * s.n + gap, sc = s.m * s.n + gap;
  std::vector<float> a = stored<T>(randn(sa * batch)), b = stored<T>(randn(sb * batch)),
                     bias = stored<T>(randn(s.n));
  if (precision == GemmPrecision::TF32) {
    a = tf32(a);
    b = tf32(b);
  }
  DeviceBuffer<T> da(a), db(b), dbias(bias), dc(sc * batch);
  GemmArgs g;
  g.precision = precision;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = s.m;
  g.n = s.n;
  g.k = s.k;
  g.a = da.get();
  g.b = db.get();
  g.c = dc.get();
  g.batch = batch;
  g.stride_a = sa;
  g.stride_b = sb;
  g.stride_c = sc;
  g.epilogue = epilogue;
  g.bias = dbias.get();
  gemm.run(g, nullptr);
  std::vector<float> got = dc.download();
  for (std::int64_t e = 0; e < batch; ++e) {
    auto slice = [](const std::vector<float>& v, std::int64_t off, std::int64_t len) {
      return std::vector<float>(v.begin() + off, v.begin() + off + len);
    };
    Tensor at = cpu(slice(a, e * sa, s.m * s.k), ta ? Shape{s.k, s.m} : Shape{s.m, s.k});
    Tensor bt = cpu(slice(b, e * sb, s.k * s.n), tb ? Shape{s.n, s.k} : Shape{s.k, s.n});
    Tensor ref = mm(ta ? at.t() : at, tb ? bt.t() : bt);
    if (epilogue == GemmEpilogue::Bias || epilogue == GemmEpilogue::BiasGelu)
      ref = add(ref, cpu(bias, {s.n}));
    if (epilogue == GemmEpilogue::Gelu || epilogue == GemmEpilogue::BiasGelu)
      ref = gelu(ref, "tanh");
    FSDP_CHECK_CLOSE(name(precision)
                         << " m=" << s.m << " n=" << s.n << " k=" << s.k << " ta=" << ta
                         << " tb=" << tb << " batch entry " << e << " epilogue=" << int(epilogue),
                     slice(got, e * sc, s.m * s.n), ref.to_vector(), tol(precision));
    if (gap)  // the gap between batch entries is not written: still NaN
      BOOST_TEST(std::isnan(got[e * sc + s.m * s.n]));
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_precision_and_transpose_pair) {
  Gemm gemm;
  for (const Case& s : kShapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        check<float>(gemm, GemmPrecision::FP32, s, ta, tb, 1, GemmEpilogue::None);
        check<float>(gemm, GemmPrecision::TF32, s, ta, tb, 1, GemmEpilogue::None);
        check<bf16>(gemm, GemmPrecision::BF16, s, ta, tb, 1, GemmEpilogue::None);
        check<fp16>(gemm, GemmPrecision::FP16, s, ta, tb, 1, GemmEpilogue::None);
      }
}

BOOST_AUTO_TEST_CASE(strided_batches_as_attention_uses_them) {
  Gemm gemm;
  // (B*H, T, hd) @ (B*H, hd, T): scores; then (B*H, T, T) @ (B*H, T, hd).
  check<float>(gemm, GemmPrecision::FP32, {65, 65, 64}, false, true, 5, GemmEpilogue::None);
  check<bf16>(gemm, GemmPrecision::BF16, {128, 64, 128}, false, false, 3, GemmEpilogue::None);
  check<bf16>(gemm, GemmPrecision::BF16, {7, 9, 11}, true, false, 4, GemmEpilogue::None);
  check<fp16>(gemm, GemmPrecision::FP16, {128, 64, 128}, false, false, 3, GemmEpilogue::None);
  check<fp16>(gemm, GemmPrecision::FP16, {7, 9, 11}, true, false, 4, GemmEpilogue::None);
}

BOOST_AUTO_TEST_CASE(bias_and_gelu_epilogues) {
  Gemm gemm;
  for (GemmEpilogue e : {GemmEpilogue::Bias, GemmEpilogue::Gelu, GemmEpilogue::BiasGelu}) {
    // linear: x (m, k) @ W^T, W stored (n, k), as nn.Linear keeps it.
    check<float>(gemm, GemmPrecision::FP32, {33, 17, 9}, false, true, 1, e);
    check<bf16>(gemm, GemmPrecision::BF16, {256, 3072, 768}, false, true, 1, e);
    check<fp16>(gemm, GemmPrecision::FP16, {256, 3072, 768}, false, true, 1, e);
  }
}

BOOST_AUTO_TEST_CASE(padded_leading_dims_read_only_their_rows) {
  Gemm gemm;
  const std::int64_t m = 5, n = 6, k = 7, ld = 16;
  std::vector<float> a = randn(m * ld), b = randn(k * ld);
  DeviceBuffer<float> da(a), db(b), dc(m * ld);
  GemmArgs g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = da.get();
  g.b = db.get();
  g.c = dc.get();
  g.lda = g.ldb = g.ldc = ld;
  gemm.run(g, nullptr);
  Tensor at = narrow(cpu(a, {m, ld}), 1, 0, k), bt = narrow(cpu(b, {k, ld}), 1, 0, n);
  std::vector<float> got = dc.download(), rows;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) rows.push_back(got[i * ld + j]);
  FSDP_CHECK_CLOSE("padded lds", rows, mm(at, bt).to_vector(), kTolFp32);
}

// The heuristic's answer is kept per problem: the same problem on other buffers asks it no more
// (and is right), another shape or a less aligned operand is a new problem (an algorithm chosen
// for 256-byte aligned operands may misread a view that starts anywhere).
BOOST_AUTO_TEST_CASE(the_heuristic_is_asked_once_a_problem) {
  Gemm gemm;
  BOOST_TEST(gemm.plans() == 0u);
  check<bf16>(gemm, GemmPrecision::BF16, {129, 65, 33}, false, true, 1, GemmEpilogue::None);
  BOOST_TEST(gemm.plans() == 1u);
  check<bf16>(gemm, GemmPrecision::BF16, {129, 65, 33}, false, true, 1, GemmEpilogue::None);
  BOOST_TEST(gemm.plans() == 1u);
  check<bf16>(gemm, GemmPrecision::BF16, {129, 65, 33}, false, true, 1, GemmEpilogue::Bias);
  BOOST_TEST(gemm.plans() == 2u);
  check<float>(gemm, GemmPrecision::FP32, {129, 65, 33}, false, true, 1, GemmEpilogue::None);
  BOOST_TEST(gemm.plans() == 3u);
  // A starting one float past an allocation: aligned to 4 bytes only.
  const std::int64_t m = 8, n = 16, k = 32;
  std::vector<float> a = randn(m * k + 1), b = randn(k * n);
  DeviceBuffer<float> da(a), db(b), dc(m * n);
  GemmArgs g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = da.get();
  g.b = db.get();
  g.c = dc.get();
  gemm.run(g, nullptr);
  BOOST_TEST(gemm.plans() == 4u);
  g.a = da.get() + 1;
  gemm.run(g, nullptr);
  BOOST_TEST(gemm.plans() == 5u);
  Tensor at = cpu(std::vector<float>(a.begin() + 1, a.end()), {m, k});
  FSDP_CHECK_CLOSE("A at a 4-byte offset", dc.download(), mm(at, cpu(b, {k, n})).to_vector(),
                   kTolFp32);
}

BOOST_AUTO_TEST_CASE(an_empty_inner_dimension_gives_zeros) {
  Gemm gemm;
  DeviceBuffer<float> a(1), b(1), c(2 * 3 * 4);
  GemmArgs g;
  g.m = 3;
  g.n = 4;
  g.k = 0;
  g.a = a.get();
  g.b = b.get();
  g.c = c.get();
  g.batch = 2;
  g.stride_c = 12;
  gemm.run(g, nullptr);
  FSDP_CHECK_CLOSE("k=0", c.download(), std::vector<float>(24, 0.0f), 0.0);
}

BOOST_AUTO_TEST_CASE(bad_arguments_are_named) {
  Gemm gemm;
  GemmArgs g;
  g.m = 4;
  g.n = 4;
  g.k = 4;
  g.lda = 2;
  try {
    gemm.run(g, nullptr);
    BOOST_FAIL("expected ValueError");
  } catch (const ValueError& e) {
    BOOST_TEST(std::string(e.what()) ==
               "gemm fp32 m=4 n=4 k=4 trans_a=false trans_b=false batch=1 epilogue=none: "
               "leading dims lda=2 ldb=4 ldc=4 are smaller than the rows they hold");
  }
  g.lda = 0;
  g.epilogue = GemmEpilogue::Bias;
  BOOST_CHECK_THROW(gemm.run(g, nullptr), ValueError);
}
