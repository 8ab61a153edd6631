// packed_causal_attention (core/ops/packed_causal_attention.h) against what it replaces in
// MultiheadAttention: the projection narrowed into heads, scaled_dot_product_attention with
// is_causal, the heads merged back; values and the projection's gradient, in float64, float32,
// bf16 and fp16; a non-contiguous projection; meta shapes; its error messages.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/ops/packed_causal_attention.h"
#include "tests/support/error_message.h"

namespace fsdp::testing {
namespace {

// The reference: heads as (N, H, L, hd) copies of proj's parts, sdpa, merged to (L, N, E).
Tensor unfused(const Tensor& proj, std::int64_t heads, double scale) {
  const std::int64_t L = proj.size(0), N = proj.size(1), E = proj.size(2) / 3;
  auto part = [&](std::int64_t p) {
    return proj.narrow(2, p * E, E).reshape({L, N, heads, E / heads}).permute({1, 2, 0, 3});
  };
  Tensor out = scaled_dot_product_attention(part(0), part(1), part(2), {}, true, scale);
  return out.permute({2, 0, 1, 3}).reshape({L, N, E});
}

double worst_difference(const Tensor& a, const Tensor& b) {
  BOOST_REQUIRE(a.shape() == b.shape());
  const auto va = a.to_vector(), vb = b.to_vector();
  double worst = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    if (!std::isfinite(va[i])) return INFINITY;
    worst = std::max(worst, std::abs(va[i] - vb[i]));
  }
  return worst;
}

void compare(DType dt, std::int64_t L, std::int64_t N, std::int64_t heads, std::int64_t hd,
             double tol) {
  manual_seed(11);
  const std::int64_t E = heads * hd;
  const double scale = 1.0 / std::sqrt(double(hd));
  Tensor base = randn({L, N, 3 * E}, TensorOptions(dt));
  Tensor a = base.clone().requires_grad_(), b = base.clone().requires_grad_();
  Tensor fused = packed_causal_attention(a, heads, scale), ref = unfused(b, heads, scale);
  BOOST_TEST_CONTEXT(dtype_name(dt)
                     << " L " << L << " N " << N << " heads " << heads << " hd " << hd) {
    BOOST_TEST((fused.shape() == Shape{L, N, E}));
    BOOST_TEST(worst_difference(fused, ref) <= tol);
    // Different weights per element so that a gradient in the wrong part or head shows.
    Tensor w = randn({L, N, E}, TensorOptions(dt));
    sum(mul(fused, w)).backward();
    sum(mul(ref, w)).backward();
    BOOST_TEST(worst_difference(a.grad(), b.grad()) <= tol);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(packed_causal_attention_op)

BOOST_AUTO_TEST_CASE(matches_heads_through_scaled_dot_product_attention) {
  compare(DType::Float64, 7, 3, 2, 5, 1e-12);
  compare(DType::Float64, 1, 1, 1, 4, 1e-12);
  compare(DType::Float32, 70, 2, 3, 8, 1e-5);  // more than one key block
  // 16 bits: both compute in float32 from the same values and round once.
  compare(DType::BFloat16, 9, 2, 2, 64, 1e-2);
  compare(DType::Float16, 9, 2, 2, 16, 1e-3);
}

BOOST_AUTO_TEST_CASE(reads_a_non_contiguous_projection) {
  manual_seed(5);
  Tensor t = randn({2, 6, 12});
  Tensor proj = t.transpose(0, 1);  // (6, 2, 12), not contiguous
  BOOST_TEST(worst_difference(packed_causal_attention(proj, 2, 0.5),
                              unfused(proj.contiguous(), 2, 0.5)) <= 1e-6);
}

BOOST_AUTO_TEST_CASE(meta_gives_the_merged_shape) {
  Tensor out =
      packed_causal_attention(empty({5, 2, 24}, TensorOptions().with_device(kMeta)), 4, 1.0);
  BOOST_TEST(out.is_meta());
  BOOST_TEST((out.shape() == Shape{5, 2, 8}));
}

BOOST_AUTO_TEST_CASE(errors_name_the_shape_and_dtype) {
  BOOST_TEST(error_message([] {
               packed_causal_attention(zeros({2, 3, 10}), 2, 1.0);
             }) ==
             "packed_causal_attention: expected proj (L, N, 3 * heads * head_dim), got shape "
             "[2, 3, 10] for 2 heads");
  BOOST_TEST(error_message([] {
               packed_causal_attention(zeros({2, 3, 6}, TensorOptions(DType::Int64)), 1, 1.0);
             }) ==
             "packed_causal_attention: not implemented for dtype int64 (shape [2, 3, 6]); "
             "expected a floating dtype");
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace fsdp::testing
