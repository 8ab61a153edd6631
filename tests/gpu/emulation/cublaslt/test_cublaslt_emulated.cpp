// The emulated cuBLASLt (tests/gpu/emulation/cublaslt): its host product against a double loop
// over every transpose pair, order, padded leading dim, batch, beta (none, C apart from D, in
// place), storage type and epilogue; TF32's, bf16's and fp16's rounding; the statuses and lines of
// what it refuses; and its C API on a stand-in runtime (test_device_stub.h): the call checks the
// pointers and queues a product that uses the values of call time.
#define BOOST_TEST_MODULE cuda_emulated_cublaslt
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "tests/gpu/emulation/cublaslt/matmul_host.h"
#include "tests/gpu/emulation/cublaslt/test_device_stub.h"

using namespace fsdp::emu::cublaslt;
namespace stub = fsdp::emu::testing;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A matrix operand: its layout and its storage, every element outside the matrices NaN (a read
// of padding shows, a write of padding is caught).
struct Operand {
  Layout layout;
  std::vector<unsigned char> bytes;

  std::int64_t index(std::int64_t e, std::int64_t i, std::int64_t j) const {
    const std::int64_t in =
        layout.order == CUBLASLT_ORDER_ROW ? i * layout.ld + j : i + j * layout.ld;
    return e * layout.batch_stride + in;
  }
  float get(std::int64_t at) const {
    if (layout.type == CUDA_R_32F) {
      float v;
      std::memcpy(&v, &bytes[at * 4], 4);
      return v;
    }
    std::uint16_t raw;
    std::memcpy(&raw, &bytes[at * 2], 2);
    if (layout.type == CUDA_R_16BF) {
      std::uint32_t bits = std::uint32_t(raw) << 16;
      float v;
      std::memcpy(&v, &bits, 4);
      return v;
    }
    __half_raw h;
    h.x = raw;
    return __half2float(__half(h));
  }
  void set(std::int64_t at, float v) {
    if (layout.type == CUDA_R_32F) {
      std::memcpy(&bytes[at * 4], &v, 4);
    } else if (layout.type == CUDA_R_16BF) {
      __nv_bfloat16 b = __float2bfloat16_rn(v);
      std::memcpy(&bytes[at * 2], &b, 2);
    } else {
      const __half_raw h = __half(__float2half_rn(v));
      std::memcpy(&bytes[at * 2], &h.x, 2);
    }
  }
  float at(std::int64_t e, std::int64_t i, std::int64_t j) const { return get(index(e, i, j)); }
  std::size_t count() const { return bytes.size() / (layout.type == CUDA_R_32F ? 4 : 2); }
  void* data() { return bytes.data(); }
};

// rows x cols per batch entry; ld and batch stride padded by `pad` elements; small integers
// (exact in every type and in float sums) from a fixed sequence.
Operand make(cudaDataType_t type, cublasLtOrder_t order, std::uint64_t rows, std::uint64_t cols,
             std::int32_t batch, std::int64_t pad, int seed) {
  Operand o;
  o.layout.type = type;
  o.layout.order = order;
  o.layout.rows = rows;
  o.layout.cols = cols;
  o.layout.ld = std::int64_t(order == CUBLASLT_ORDER_ROW ? cols : rows) + pad;
  o.layout.batch_count = batch;
  const std::int64_t one =
      std::int64_t(order == CUBLASLT_ORDER_ROW ? rows : cols) * o.layout.ld + pad;
  o.layout.batch_stride = batch > 1 ? one : 0;
  const std::int64_t count = o.layout.batch_stride * (batch - 1) + one;
  o.bytes.resize(std::size_t(count) * (type == CUDA_R_32F ? 4 : 2));
  for (std::int64_t x = 0; x < count; ++x) o.set(x, kNaN);
  for (std::int32_t e = 0; e < batch; ++e)
    for (std::uint64_t i = 0; i < rows; ++i)
      for (std::uint64_t j = 0; j < cols; ++j)
        o.set(o.index(e, i, j), float(int((seed + 7 * e + 5 * i + 3 * j + i * j) % 5) - 2));
  return o;
}

struct Case {
  cudaDataType_t ab = CUDA_R_32F, cd = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  cublasLtOrder_t order = CUBLASLT_ORDER_COL;
  std::int32_t batch = 1;
  std::int64_t pad = 0;
  enum { NoC, CApart, InPlace } beta_mode = NoC;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  std::int64_t bias_stride = 0;
  std::uint64_t m = 5, n = 7, k = 6;
  float alpha = 1.5f;
};

std::string describe(const Case& c) {
  return "ab=" + type_name(c.ab) + " cd=" + type_name(c.cd) + " ta=" + std::to_string(c.ta) +
         " tb=" + std::to_string(c.tb) + " order=" + std::to_string(c.order) +
         " batch=" + std::to_string(c.batch) + " pad=" + std::to_string(c.pad) +
         " beta_mode=" + std::to_string(int(c.beta_mode)) +
         " epilogue=" + std::to_string(c.epilogue);
}

// Runs `c` through check_matmul and run_matmul and compares every element of D with a double
// loop over the stored values; D's padding must stay NaN. `tol` 0 asks for exact equality.
void check_case(const Case& c, double tol) {
  const bool ta = c.ta == CUBLAS_OP_T, tb = c.tb == CUBLAS_OP_T;
  Operand a = make(c.ab, c.order, ta ? c.k : c.m, ta ? c.m : c.k, c.batch, c.pad, 1);
  Operand b = make(c.ab, c.order, tb ? c.n : c.k, tb ? c.k : c.n, c.batch, c.pad + 1, 2);
  Operand d = make(c.cd, c.order, c.m, c.n, c.batch, c.pad, 3);
  Operand c_apart = make(c.cd, c.order, c.m, c.n, c.batch, c.pad + 2, 4);
  // BGRADB writes n values (op(B)'s sums over k); one more stays NaN.
  const bool bias_grad = c.epilogue == CUBLASLT_EPILOGUE_BGRADB;
  const std::int64_t bias_count =
      bias_grad ? std::int64_t(c.n) + 1 : c.bias_stride * (c.batch - 1) + std::int64_t(c.m);
  Operand bias = make(c.cd, CUBLASLT_ORDER_COL, std::uint64_t(bias_count), 1, 1, 0, 5);
  if (bias_grad)
    for (std::int64_t x = 0; x < bias_count; ++x) bias.set(x, kNaN);
  const Operand d_before = d;
  MatmulProblem p;
  p.desc.compute = c.compute;
  p.desc.trans_a = c.ta;
  p.desc.trans_b = c.tb;
  p.desc.epilogue = c.epilogue;
  p.desc.bias = bias.data();
  p.desc.bias_batch_stride = c.bias_stride;
  p.a = a.layout;
  p.b = b.layout;
  p.d = d.layout;
  p.alpha = c.alpha;
  p.beta = c.beta_mode == Case::NoC ? 0.0f : c.beta_mode == Case::CApart ? 0.5f : 2.0f;
  p.a_ptr = a.data();
  p.b_ptr = b.data();
  p.d_ptr = d.data();
  const Operand& c_op = c.beta_mode == Case::CApart ? c_apart : d_before;
  p.c = c.beta_mode == Case::CApart ? c_apart.layout : d.layout;
  p.c_ptr = c.beta_mode == Case::CApart ? c_apart.data() : d.data();
  Status s = check_matmul("test", p.desc, p.a, p.b, p.c, p.d, p.c_ptr == p.d_ptr);
  BOOST_TEST_REQUIRE(s.ok(), describe(c) << ": " << s.message);
  run_matmul(p);
  const bool bias_on =
      c.epilogue == CUBLASLT_EPILOGUE_BIAS || c.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS;
  const bool gelu_on =
      c.epilogue == CUBLASLT_EPILOGUE_GELU || c.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS;
  std::vector<bool> written(d.count(), false);
  for (std::int32_t e = 0; e < c.batch; ++e)
    for (std::uint64_t i = 0; i < c.m; ++i)
      for (std::uint64_t j = 0; j < c.n; ++j) {
        double ref = 0;
        for (std::uint64_t q = 0; q < c.k; ++q)
          ref += double(ta ? a.at(e, q, i) : a.at(e, i, q)) *
                 double(tb ? b.at(e, j, q) : b.at(e, q, j));
        ref *= c.alpha;
        if (c.beta_mode != Case::NoC) ref += p.beta * double(c_op.at(e, i, j));
        if (bias_on) ref += bias.get(e * c.bias_stride + std::int64_t(i));
        if (gelu_on)
          ref =
              0.5 * ref * (1 + std::tanh(0.7978845608028654 * (ref + 0.044715 * ref * ref * ref)));
        const float got = d.at(e, i, j);
        written[d.index(e, i, j)] = true;
        if (tol == 0)
          BOOST_TEST(got == ref, describe(c) << " at batch " << e << " (" << i << ", " << j << ")");
        else
          BOOST_TEST(std::abs(got - ref) <= tol * std::max(1.0, std::abs(ref)),
                     describe(c) << " at batch " << e << " (" << i << ", " << j << "): " << got
                                 << " vs " << ref);
      }
  std::size_t padding_written = 0;
  for (std::size_t x = 0; x < d.count(); ++x)
    if (!written[x] && !std::isnan(d.get(std::int64_t(x)))) ++padding_written;
  BOOST_TEST(padding_written == 0u, describe(c));
  if (!bias_grad) return;
  for (std::uint64_t j = 0; j < c.n; ++j) {
    double ref = 0;  // small integers: exact in every type
    for (std::uint64_t q = 0; q < c.k; ++q) ref += double(tb ? b.at(0, j, q) : b.at(0, q, j));
    BOOST_TEST(bias.get(std::int64_t(j)) == ref, describe(c) << " bias gradient " << j);
  }
  BOOST_TEST(std::isnan(bias.get(std::int64_t(c.n))), describe(c));
}

float from_bits(std::uint32_t bits) {
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

// A 1 x n times n x 1 product of fp32, bf16 or fp16 values into `cd`, through run_matmul.
float dot(const std::vector<float>& x, const std::vector<float>& y, cudaDataType_t ab,
          cudaDataType_t cd, cublasComputeType_t compute) {
  Operand a = make(ab, CUBLASLT_ORDER_COL, 1, x.size(), 1, 0, 0);
  Operand b = make(ab, CUBLASLT_ORDER_COL, y.size(), 1, 1, 0, 0);
  Operand d = make(cd, CUBLASLT_ORDER_COL, 1, 1, 1, 0, 0);
  for (std::size_t q = 0; q < x.size(); ++q) {
    a.set(a.index(0, 0, q), x[q]);
    b.set(b.index(0, q, 0), y[q]);
  }
  MatmulProblem p;
  p.desc.compute = compute;
  p.a = a.layout;
  p.b = b.layout;
  p.c = p.d = d.layout;
  p.a_ptr = a.data();
  p.b_ptr = b.data();
  p.c_ptr = p.d_ptr = d.data();
  BOOST_TEST_REQUIRE(check_matmul("test", p.desc, p.a, p.b, p.c, p.d, true).ok());
  run_matmul(p);
  return d.at(0, 0, 0);
}

Layout col(std::uint64_t rows, std::uint64_t cols, std::int64_t ld,
           cudaDataType_t type = CUDA_R_32F) {
  Layout l;
  l.type = type;
  l.rows = rows;
  l.cols = cols;
  l.ld = ld;
  return l;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(host_product)

BOOST_AUTO_TEST_CASE(every_transpose_order_ld_batch_beta_and_type_equals_a_double_loop) {
  struct Types {
    cudaDataType_t ab, cd;
    cublasComputeType_t compute;
  };
  const Types types[] = {{CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F},
                         {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32},
                         {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F},
                         {CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F},
                         {CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F}};
  for (const Types& t : types)
    for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T})
      for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T})
        for (cublasLtOrder_t order : {CUBLASLT_ORDER_COL, CUBLASLT_ORDER_ROW})
          for (std::int32_t batch : {1, 3})
            for (auto beta : {Case::NoC, Case::CApart, Case::InPlace}) {
              Case c;
              c.ab = t.ab;
              c.cd = t.cd;
              c.compute = t.compute;
              c.ta = ta;
              c.tb = tb;
              c.order = order;
              c.batch = batch;
              c.pad = batch == 1 ? 0 : 2;
              c.beta_mode = beta;
              check_case(c, 0.0);  // small integers: every type and sum is exact
            }
}

BOOST_AUTO_TEST_CASE(a_single_row_column_and_inner_dimension) {
  const std::tuple<int, int, int> shapes[] = {{1, 1, 1}, {1, 9, 4}, {9, 1, 4}, {3, 4, 1}};
  for (auto [m, n, k] : shapes) {
    Case c;
    c.m = m;
    c.n = n;
    c.k = k;
    c.ta = CUBLAS_OP_T;
    check_case(c, 0.0);
  }
}

BOOST_AUTO_TEST_CASE(beta_zero_does_not_read_c) {
  Operand a = make(CUDA_R_32F, CUBLASLT_ORDER_COL, 2, 2, 1, 0, 1);
  Operand d = make(CUDA_R_32F, CUBLASLT_ORDER_COL, 2, 2, 1, 0, 1);
  for (std::int64_t x = 0; x < 4; ++x) d.set(x, kNaN);
  MatmulProblem p;
  p.a = p.b = p.c = p.d = a.layout;
  p.a_ptr = p.b_ptr = a.data();
  p.c_ptr = p.d_ptr = d.data();
  run_matmul(p);
  for (std::int64_t x = 0; x < 4; ++x) BOOST_TEST(std::isfinite(d.get(x)));
}

BOOST_AUTO_TEST_CASE(bias_is_per_row_of_d_and_gelu_is_the_tanh_form) {
  for (cublasLtEpilogue_t e :
       {CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS})
    for (cublasLtOrder_t order : {CUBLASLT_ORDER_COL, CUBLASLT_ORDER_ROW})
      for (std::int64_t bias_stride : {0, 5}) {
        Case c;
        c.epilogue = e;
        c.order = order;
        c.batch = 2;
        c.bias_stride = bias_stride;  // 0: one bias for every batch entry
        c.beta_mode = Case::CApart;
        c.alpha = 0.25f;  // GELU's interesting range
        check_case(c, e == CUBLASLT_EPILOGUE_BIAS ? 0.0 : 2e-6);
        c.ab = c.cd = CUDA_R_16BF;
        check_case(c, e == CUBLASLT_EPILOGUE_BIAS ? 0.0 : 1.0 / 128);  // bf16's half ulp
        c.ab = c.cd = CUDA_R_16F;
        check_case(c, e == CUBLASLT_EPILOGUE_BIAS ? 0.0 : 1.0 / 1024);  // fp16's half ulp
      }
}

// A linear layer's bias gradient in its weight gradient's product: op(B) summed over k, one
// value per column of D, unscaled by alpha; D is the product as without the epilogue.
BOOST_AUTO_TEST_CASE(bgradb_sums_op_b_over_k_for_each_column_of_d) {
  for (cudaDataType_t type : {CUDA_R_32F, CUDA_R_16BF, CUDA_R_16F})
    for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T})
      for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T})
        for (cublasLtOrder_t order : {CUBLASLT_ORDER_COL, CUBLASLT_ORDER_ROW}) {
          Case c;
          c.ab = c.cd = type;
          c.ta = ta;
          c.tb = tb;
          c.order = order;
          c.pad = 1;
          c.epilogue = CUBLASLT_EPILOGUE_BGRADB;
          check_case(c, 0.0);
        }
  MatmulDesc desc;
  desc.epilogue = CUBLASLT_EPILOGUE_BGRADB;
  int bias = 0;
  desc.bias = &bias;
  const Operand a = make(CUDA_R_32F, CUBLASLT_ORDER_COL, 5, 6, 2, 0, 1);
  const Operand b = make(CUDA_R_32F, CUBLASLT_ORDER_COL, 6, 7, 2, 0, 2);
  const Operand d = make(CUDA_R_32F, CUBLASLT_ORDER_COL, 5, 7, 2, 0, 3);
  const Status s = check_matmul("test", desc, a.layout, b.layout, d.layout, d.layout, true);
  BOOST_TEST(s.message == "test: BGRADB over 2 batch entries is not emulated (one is)");
  desc.bias = nullptr;
  const Operand a1 = make(CUDA_R_32F, CUBLASLT_ORDER_COL, 5, 6, 1, 0, 1);
  const Operand b1 = make(CUDA_R_32F, CUBLASLT_ORDER_COL, 6, 7, 1, 0, 2);
  const Operand d1 = make(CUDA_R_32F, CUBLASLT_ORDER_COL, 5, 7, 1, 0, 3);
  BOOST_TEST(check_matmul("test", desc, a1.layout, b1.layout, d1.layout, d1.layout, true).message ==
             "test: BGRADB without CUBLASLT_MATMUL_DESC_BIAS_POINTER");
}

BOOST_AUTO_TEST_CASE(tf32_rounds_inputs_to_nearest_even) {
  const float one = 1.0f, ulp = std::ldexp(1.0f, -10);  // TF32's spacing at 1
  const float tie_down = one + ulp / 2;                 // halfway, 1 is even
  const float tie_up = one + ulp + ulp / 2;             // halfway, 1 + 2 ulp is even
  const float above = one + ulp / 2 + std::ldexp(1.0f, -20);
  BOOST_TEST(round_to_tf32(tie_down) == one);
  BOOST_TEST(round_to_tf32(tie_up) == one + 2 * ulp);
  BOOST_TEST(round_to_tf32(above) == one + ulp);
  BOOST_TEST(round_to_tf32(-tie_down) == -one);
  BOOST_TEST(std::isinf(round_to_tf32(from_bits(0x7f7fffffu))));  // the largest float
  BOOST_TEST(std::isnan(round_to_tf32(kNaN)));
  // Through the product: both inputs rounded, the product summed in float.
  const auto tf32 = CUBLAS_COMPUTE_32F_FAST_TF32;
  BOOST_TEST(dot({tie_down}, {1.0f}, CUDA_R_32F, CUDA_R_32F, tf32) == one);
  BOOST_TEST(dot({tie_up}, {tie_down}, CUDA_R_32F, CUDA_R_32F, tf32) == one + 2 * ulp);
  BOOST_TEST(dot({tie_down}, {1.0f}, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F) == tie_down);
}

BOOST_AUTO_TEST_CASE(bf16_accumulates_in_float_and_rounds_once) {
  const float e8 = std::ldexp(1.0f, -8), e7 = std::ldexp(1.0f, -7), e6 = std::ldexp(1.0f, -6);
  // 1 + 2^-8 is exact in float and halfway between bf16's 1 and 1 + 2^-7: even is 1.
  BOOST_TEST(dot({1, 1}, {1, e8}, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F) == 1 + e8);
  BOOST_TEST(dot({1, 1}, {1, e8}, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F) == 1.0f);
  BOOST_TEST(dot({1, 1, 1}, {1, e7, e8}, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F) == 1 + e6);
  // Summed in bf16 term by term, 1 + 2^-8 + 2^-8 would stay 1; in float it is 1 + 2^-7.
  BOOST_TEST(dot({1, 1, 1}, {1, e8, e8}, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F) == 1 + e7);
}

BOOST_AUTO_TEST_CASE(fp16_accumulates_in_float_rounds_once_and_overflows_to_inf) {
  const float e11 = std::ldexp(1.0f, -11), e10 = std::ldexp(1.0f, -10), e9 = std::ldexp(1.0f, -9);
  const auto f32 = CUBLAS_COMPUTE_32F;
  // 1 + 2^-11 is exact in float and halfway between fp16's 1 and 1 + 2^-10: even is 1.
  BOOST_TEST(dot({1, 1}, {1, e11}, CUDA_R_16F, CUDA_R_32F, f32) == 1 + e11);
  BOOST_TEST(dot({1, 1}, {1, e11}, CUDA_R_16F, CUDA_R_16F, f32) == 1.0f);
  BOOST_TEST(dot({1, 1, 1}, {1, e10, e11}, CUDA_R_16F, CUDA_R_16F, f32) == 1 + e9);
  // Summed in fp16 term by term, 1 + 2^-11 + 2^-11 would stay 1; in float it is 1 + 2^-10.
  BOOST_TEST(dot({1, 1, 1}, {1, e11, e11}, CUDA_R_16F, CUDA_R_16F, f32) == 1 + e10);
  // fp16's largest finite value is 65504: 256 * 256 rounds to inf in fp16, not in float.
  BOOST_TEST(dot({256}, {256}, CUDA_R_16F, CUDA_R_32F, f32) == 65536.0f);
  BOOST_TEST(std::isinf(dot({256}, {256}, CUDA_R_16F, CUDA_R_16F, f32)));
  BOOST_TEST(dot({255, 1}, {256, 224}, CUDA_R_16F, CUDA_R_16F, f32) == 65504.0f);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(refusals)

BOOST_AUTO_TEST_CASE(invalid_values_are_named) {
  MatmulDesc desc;
  Status s = check_matmul("cublasLtMatmul", desc, col(4, 3, 2), col(3, 5, 3), col(4, 5, 4),
                          col(4, 5, 4), true);
  BOOST_TEST(s.code == CUBLAS_STATUS_INVALID_VALUE);
  BOOST_TEST(s.message ==
             "cublasLtMatmul: A's leading dim 2 is smaller than its 4 rows (CUBLASLT_ORDER_COL)");
  Layout row_a = col(4, 3, 2);
  row_a.order = CUBLASLT_ORDER_ROW;
  Layout row_d = col(4, 5, 4);
  row_d.order = CUBLASLT_ORDER_ROW;
  s = check_matmul("cublasLtMatmul", desc, row_a, col(3, 5, 3), row_d, row_d, true);
  BOOST_TEST(s.message ==
             "cublasLtMatmul: A's leading dim 2 is smaller than its 3 columns "
             "(CUBLASLT_ORDER_ROW)");
  s = check_matmul("cublasLtMatmul", desc, col(4, 3, 4), col(2, 5, 3), col(4, 5, 4), col(4, 5, 4),
                   true);
  BOOST_TEST(s.code == CUBLAS_STATUS_INVALID_VALUE);
  BOOST_TEST(s.message ==
             "cublasLtMatmul: shapes in conflict: A 4x3 (CUBLAS_OP_N), B 2x5 (CUBLAS_OP_N), C "
             "4x5, D 4x5 (op(A) must be rows(D) x k, op(B) k x cols(D), C as D)");
  // D's batch entries on top of each other; interleaved ones (stride = rows, ld = 2 rows) are
  // apart and accepted.
  Layout a = col(4, 3, 4), b = col(3, 5, 3), d = col(4, 5, 4);
  a.batch_count = b.batch_count = d.batch_count = 2;
  d.batch_stride = 3;
  s = check_matmul("cublasLtMatmul", desc, a, b, d, d, true);
  BOOST_TEST(s.code == CUBLAS_STATUS_INVALID_VALUE);
  BOOST_TEST(s.message ==
             "cublasLtMatmul: D's 2 batch entries overlap (batch stride 3, leading dim 4, 4x5): "
             "they would race");
  d.ld = 8;
  d.batch_stride = 4;
  BOOST_TEST(check_matmul("cublasLtMatmul", desc, a, b, d, d, true).ok());
  // In place needs C's layout to be D's.
  Layout c = d;
  c.ld = 9;
  s = check_matmul("cublasLtMatmul", desc, a, b, c, d, true);
  BOOST_TEST(s.code == CUBLAS_STATUS_INVALID_VALUE);
  BOOST_TEST(s.message ==
             "cublasLtMatmul: in place (C == D) needs C's layout to be D's: ld 9 and 8, batch "
             "stride 4 and 4");
}

BOOST_AUTO_TEST_CASE(what_is_not_emulated_is_not_supported_and_named) {
  MatmulDesc desc;
  Status s = check_compute(CUBLAS_COMPUTE_16F, CUDA_R_16F);
  BOOST_TEST(s.code == CUBLAS_STATUS_NOT_SUPPORTED);
  BOOST_TEST(s.message ==
             "cublasLtMatmulDesc: compute type 64 is not emulated (CUBLAS_COMPUTE_32F and "
             "CUBLAS_COMPUTE_32F_FAST_TF32 are)");
  s = check_layout_type(CUDA_R_8I);
  BOOST_TEST(s.code == CUBLAS_STATUS_NOT_SUPPORTED);
  BOOST_TEST(s.message ==
             "cublasLtMatrixLayout: type CUDA_R_8I is not emulated (CUDA_R_32F, CUDA_R_16BF, "
             "CUDA_R_16F are)");
  // bf16 A with fp32 B; TF32 on bf16; a float bias for a bf16 D.
  s = check_matmul("cublasLtMatmul", desc, col(2, 2, 2, CUDA_R_16BF), col(2, 2, 2), col(2, 2, 2),
                   col(2, 2, 2), true);
  BOOST_TEST(s.code == CUBLAS_STATUS_NOT_SUPPORTED);
  BOOST_TEST(s.message ==
             "cublasLtMatmul: A CUDA_R_16BF, B CUDA_R_32F, C CUDA_R_32F, D CUDA_R_32F with "
             "compute type 68 is not emulated (A = B, C = D; fp32; bf16 or fp16 into their own "
             "type or fp32; TF32 on fp32)");
  MatmulDesc tf32;
  tf32.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  const Layout h = col(2, 2, 2, CUDA_R_16BF);
  BOOST_TEST(check_matmul("x", tf32, h, h, h, h, true).code == CUBLAS_STATUS_NOT_SUPPORTED);
  MatmulDesc biased;
  biased.epilogue = CUBLASLT_EPILOGUE_BIAS;
  biased.bias_type = CUDA_R_32F;
  s = check_matmul("cublasLtMatmul", biased, h, h, h, h, true);
  BOOST_TEST(s.message ==
             "cublasLtMatmul: a CUDA_R_32F bias with D of type CUDA_R_16BF is not emulated (the "
             "bias has D's type)");
  // Batch counts that differ (broadcast A), an empty product, C broadcast by ld 0.
  Layout a1 = col(2, 2, 2), d2 = col(2, 2, 2);
  d2.batch_count = 2;
  d2.batch_stride = 4;
  s = check_matmul("cublasLtMatmul", desc, a1, d2, d2, d2, true);
  BOOST_TEST(s.message == "cublasLtMatmul: batch counts A 1 B 2 C 2 D 2 differ: not emulated");
  s = check_matmul("cublasLtMatmul", desc, col(2, 0, 2), col(0, 2, 1), col(2, 2, 2), col(2, 2, 2),
                   true);
  BOOST_TEST(s.message == "cublasLtMatmul: an empty product (m=2 n=2 k=0) is not emulated");
  s = check_matmul("cublasLtMatmul", desc, col(2, 2, 2), col(2, 2, 2), col(2, 2, 0), col(2, 2, 2),
                   false);
  BOOST_TEST(s.code == CUBLAS_STATUS_NOT_SUPPORTED);
  BOOST_TEST(s.message == "cublasLtMatmul: C broadcast by a zero leading dim is not emulated");
}

BOOST_AUTO_TEST_CASE(attribute_setters_check_size_value_and_support) {
  Layout l;
  const std::int32_t col32 = CUBLASLT_ORDER_COL32, row = CUBLASLT_ORDER_ROW;
  Status s = set_attribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &col32, sizeof(col32));
  BOOST_TEST(s.code == CUBLAS_STATUS_NOT_SUPPORTED);
  BOOST_TEST(s.message ==
             "cublasLtMatrixLayoutSetAttribute CUBLASLT_MATRIX_LAYOUT_ORDER: order 2 is not "
             "emulated (CUBLASLT_ORDER_COL and CUBLASLT_ORDER_ROW are)");
  BOOST_TEST(set_attribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof(row)).ok());
  BOOST_TEST(l.order == CUBLASLT_ORDER_ROW);
  const std::int32_t count = 4;  // an int32 where the attribute holds an int64
  s = set_attribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &count, sizeof(count));
  BOOST_TEST(s.code == CUBLAS_STATUS_INVALID_VALUE);
  BOOST_TEST(s.message ==
             "cublasLtMatrixLayoutSetAttribute CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: "
             "sizeInBytes is 4, the attribute holds 8 bytes");
  s = set_attribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, nullptr, 4);
  BOOST_TEST(s.message ==
             "cublasLtMatrixLayoutSetAttribute CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: the buffer "
             "is null");
  BOOST_TEST(set_attribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, 4).ok());
  BOOST_TEST(l.batch_count == 4);

  MatmulDesc d;
  const std::uint32_t relu = CUBLASLT_EPILOGUE_RELU, gelu_bias = CUBLASLT_EPILOGUE_GELU_BIAS;
  s = set_attribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &relu, sizeof(relu));
  BOOST_TEST(s.code == CUBLAS_STATUS_NOT_SUPPORTED);
  BOOST_TEST(s.message ==
             "cublasLtMatmulDescSetAttribute CUBLASLT_MATMUL_DESC_EPILOGUE: epilogue 2 is not "
             "emulated (DEFAULT, BIAS, GELU, GELU_BIAS and BGRADB are)");
  BOOST_TEST(set_attribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &gelu_bias, 4).ok());
  BOOST_TEST(d.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS);
  const std::int32_t device_mode = CUBLASLT_POINTER_MODE_DEVICE, bad_op = 7, op_t = CUBLAS_OP_T;
  BOOST_TEST(set_attribute(d, CUBLASLT_MATMUL_DESC_POINTER_MODE, &device_mode, 4).code ==
             CUBLAS_STATUS_NOT_SUPPORTED);
  s = set_attribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &bad_op, 4);
  BOOST_TEST(s.code == CUBLAS_STATUS_INVALID_VALUE);
  BOOST_TEST(s.message ==
             "cublasLtMatmulDescSetAttribute CUBLASLT_MATMUL_DESC_TRANSA: 7 is no "
             "cublasOperation_t");
  BOOST_TEST(set_attribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &op_t, 4).ok());
  BOOST_TEST(d.trans_b == CUBLAS_OP_T);
  const void* amax = &d;
  s = set_attribute(d, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &amax, sizeof(amax));
  BOOST_TEST(s.code == CUBLAS_STATUS_NOT_SUPPORTED);
  BOOST_TEST(s.message == "cublasLtMatmulDescSetAttribute: attribute 21 is not emulated");

  Preference p;
  const std::uint64_t workspace = 32u << 20;
  BOOST_TEST(set_attribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, 8).ok());
  BOOST_TEST(p.max_workspace_bytes == workspace);
  const std::uint32_t three = 3, sixteen = 16;
  BOOST_TEST(set_attribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &three, 4).code ==
             CUBLAS_STATUS_INVALID_VALUE);
  BOOST_TEST(set_attribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &sixteen, 4).ok());
  BOOST_TEST(p.min_alignment[1] == 16u);
  BOOST_TEST(set_attribute(p, CUBLASLT_MATMUL_PREF_IMPL_MASK, &p, 8).code ==
             CUBLAS_STATUS_NOT_SUPPORTED);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(c_api)

namespace {

// gemm.cpp's call in miniature: a row-major (m x n) C = A (m x k) @ B^T, B stored (n x k) as
// nn.Linear keeps it, with a bias per column of C, as cuBLASLt's column-major C^T = B A^T
// (cuBLASLt's A is our B, transposed; its B is our A).
struct Linear {
  static constexpr int m = 3, n = 4, k = 5;
  // Each 256-byte aligned, with room after it that is not device memory (a read past the
  // registered part shows).
  alignas(256) float a[m * k + 64] = {};
  alignas(256) float b[n * k + 64] = {};
  alignas(256) float bias[n + 64] = {};
  alignas(256) float c[m * n + 64] = {};
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic{};
  float alpha = 1.0f, beta = 0.0f;

  Linear() {
    for (int i = 0; i < m * k; ++i) a[i] = float(i % 7 - 3);
    for (int i = 0; i < n * k; ++i) b[i] = float(i % 5 - 2);
    for (int i = 0; i < n; ++i) bias[i] = float(10 * (i + 1));
    for (int i = 0; i < m * n; ++i) c[i] = kNaN;
    stub::add_device_range(a, m * k * 4);
    stub::add_device_range(b, n * k * 4);
    stub::add_device_range(bias, n * 4);
    stub::add_device_range(c, m * n * 4);
    BOOST_TEST_REQUIRE(cublasLtCreate(&handle) == CUBLAS_STATUS_SUCCESS);
    BOOST_TEST_REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) ==
                       CUBLAS_STATUS_SUCCESS);
    const cublasOperation_t t = CUBLAS_OP_T;
    const cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BIAS;
    const void* bias_ptr = bias;
    set(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
    set(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)));
    set(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr,
                                       sizeof(bias_ptr)));
    set(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k));  // our B (n x k) row-major
    set(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, k, m, k));  // our A (m x k) row-major
    set(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, n, m, n));  // our C (m x n) row-major
    set(cublasLtMatmulPreferenceCreate(&pref));
    int found = 0;
    set(cublasLtMatmulAlgoGetHeuristic(handle, desc, lb, la, lc, lc, pref, 1, &heuristic, &found));
    BOOST_TEST_REQUIRE(found == 1);
  }
  ~Linear() {
    stub::clear_device_ranges();
    stub::run_queued();
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(handle);
  }
  static void set(cublasStatus_t s) { BOOST_TEST_REQUIRE(s == CUBLAS_STATUS_SUCCESS); }
  cublasStatus_t matmul(const void* a_ptr, void* c_ptr, const void* b_ptr) {
    return cublasLtMatmul(handle, desc, &alpha, b_ptr, lb, a_ptr, la, &beta, c_ptr, lc, c_ptr, lc,
                          &heuristic.algo, nullptr, 0, nullptr);
  }
  cublasStatus_t matmul() { return matmul(a, c, b); }
  float expected(int i, int j, float scale) const {
    float s = 0;
    for (int q = 0; q < k; ++q) s += a[i * k + q] * b[j * k + q];
    return scale * s + bias[j];
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(the_product_is_queued_with_the_values_of_call_time) {
  Linear f;
  BOOST_TEST(f.heuristic.state == CUBLAS_STATUS_SUCCESS);
  BOOST_TEST(f.heuristic.workspaceSize == 0u);
  BOOST_TEST(f.matmul() == CUBLAS_STATUS_SUCCESS);
  BOOST_TEST(std::isnan(f.c[0]));  // queued on the stream, not run by the call
  // What the call was given changes before the stream runs it: alpha, a layout, the descriptor.
  f.alpha = 100.0f;
  const cublasLtEpilogue_t none = CUBLASLT_EPILOGUE_DEFAULT;
  Linear::set(
      cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &none, sizeof(none)));
  const std::int64_t ld = 99;
  Linear::set(cublasLtMatrixLayoutSetAttribute(f.lc, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof(ld)));
  BOOST_TEST(stub::run_queued() == 1);
  for (int i = 0; i < Linear::m; ++i)
    for (int j = 0; j < Linear::n; ++j)
      BOOST_TEST(f.c[i * Linear::n + j] == f.expected(i, j, 1.0f), "(" << i << ", " << j << ")");
}

BOOST_AUTO_TEST_CASE(host_memory_and_misaligned_operands_are_refused) {
  Linear f;
  float host[Linear::m * Linear::k] = {};
  BOOST_TEST(f.matmul(host, f.c, f.b) == CUBLAS_STATUS_INVALID_VALUE);
  BOOST_TEST(f.matmul(f.a, f.c, nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  // A buffer too short for the layout: its last element is outside device memory.
  BOOST_TEST(f.matmul(f.a + 1, f.c, f.b) == CUBLAS_STATUS_INVALID_VALUE);
  // An operand inside device memory but off the 256 bytes the algorithm was chosen for.
  stub::add_device_range(f.a, (Linear::m * Linear::k + 1) * 4);
  BOOST_TEST(f.matmul(f.a + 1, f.c, f.b) == CUBLAS_STATUS_INVALID_VALUE);
  // Chosen for 4-byte operands, the same call is accepted.
  const std::uint32_t four = 4;
  Linear::set(cublasLtMatmulPreferenceSetAttribute(
      f.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &four, sizeof(four)));
  int found = 0;
  Linear::set(cublasLtMatmulAlgoGetHeuristic(f.handle, f.desc, f.lb, f.la, f.lc, f.lc, f.pref, 1,
                                             &f.heuristic, &found));
  BOOST_TEST(f.matmul(f.a + 1, f.c, f.b) == CUBLAS_STATUS_SUCCESS);
  BOOST_TEST(stub::run_queued() == 1);
  BOOST_TEST(stub::run_queued() == 0);
  // A bias outside device memory; none queued by a refusal.
  stub::clear_device_ranges();
  stub::add_device_range(f.a, Linear::m * Linear::k * 4);
  stub::add_device_range(f.b, Linear::n * Linear::k * 4);
  stub::add_device_range(f.c, Linear::m * Linear::n * 4);
  BOOST_TEST(f.matmul() == CUBLAS_STATUS_INVALID_VALUE);
  BOOST_TEST(stub::run_queued() == 0);
}

BOOST_AUTO_TEST_CASE(memory_freed_before_the_stream_runs_the_product_is_a_fault) {
  Linear f;
  BOOST_TEST(f.matmul() == CUBLAS_STATUS_SUCCESS);
  stub::clear_device_ranges();  // freed while the product waits on its stream
  stub::add_device_range(f.a, Linear::m * Linear::k * 4);
  stub::add_device_range(f.bias, Linear::n * 4);
  stub::add_device_range(f.c, Linear::m * Linear::n * 4);
  BOOST_TEST(stub::run_queued() == 1);
  const std::vector<std::string> faults = stub::take_faults();
  BOOST_TEST_REQUIRE(faults.size() == 1u);
  BOOST_TEST(faults[0].rfind("cublasLtMatmul (as its stream ran it): A at ", 0) == 0u,
             faults[0]);           // cuBLASLt's A is the row-major B
  BOOST_TEST(std::isnan(f.c[0]));  // nothing written
}

BOOST_AUTO_TEST_CASE(statuses_calls_and_names) {
  BOOST_TEST(std::string(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED)) ==
             "CUBLAS_STATUS_NOT_SUPPORTED");
  BOOST_TEST(std::string(cublasLtGetStatusString(CUBLAS_STATUS_INVALID_VALUE)) ==
             "an invalid numeric value was used as an argument");
  cublasLtMatmulDesc_t d = nullptr;
  BOOST_TEST(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_64F, CUDA_R_64F) ==
             CUBLAS_STATUS_NOT_SUPPORTED);
  cublasLtMatrixLayout_t l = nullptr;
  BOOST_TEST(cublasLtMatrixLayoutCreate(&l, CUDA_R_8I, 2, 2, 2) == CUBLAS_STATUS_NOT_SUPPORTED);
  Linear f;
  int found = -1;
  BOOST_TEST(cublasLtMatmulAlgoGetHeuristic(f.handle, f.desc, f.lb, f.la, f.lc, f.lc, f.pref, 0,
                                            &f.heuristic, &found) == CUBLAS_STATUS_INVALID_VALUE);
  BOOST_TEST(cublasLtMatmul(nullptr, f.desc, &f.alpha, f.b, f.lb, f.a, f.la, &f.beta, f.c, f.lc,
                            f.c, f.lc, nullptr, nullptr, 0,
                            nullptr) == CUBLAS_STATUS_NOT_INITIALIZED);
  // A workspace that is not device memory, and a forged algorithm.
  float host_workspace[64];
  BOOST_TEST(cublasLtMatmul(f.handle, f.desc, &f.alpha, f.b, f.lb, f.a, f.la, &f.beta, f.c, f.lc,
                            f.c, f.lc, nullptr, host_workspace, sizeof(host_workspace),
                            nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  cublasLtMatmulAlgo_t forged{};
  BOOST_TEST(cublasLtMatmul(f.handle, f.desc, &f.alpha, f.b, f.lb, f.a, f.la, &f.beta, f.c, f.lc,
                            f.c, f.lc, &forged, nullptr, 0,
                            nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  BOOST_TEST(stub::run_queued() == 0);
}

BOOST_AUTO_TEST_SUITE_END()
