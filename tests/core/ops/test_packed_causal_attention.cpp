// packed_causal_attention (core/ops/packed_causal_attention.h) against what it replaces in
// MultiheadAttention: the projection narrowed into heads, scaled_dot_product_attention with
// is_causal, the heads merged back; values and the projection's gradient, in float64, float32,
// bf16 and fp16; a non-contiguous projection; an N-major one (batch_first's) read in place and
// its output and gradient N-major; meta shapes; its error messages.
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

// batch_first's projection: (N, L, 3E) memory seen as (L, N, 3E). Read in place, the output
// written N-major (an (L, N, E) view of (N, L, E) memory) and the projection's gradient in the
// projection's own layout; the arithmetic is the contiguous projection's, so the values and
// gradients are equal bit for bit.
BOOST_AUTO_TEST_CASE(an_n_major_projection_is_read_in_place_and_written_n_major) {
  const std::int64_t N = 3, L = 9, heads = 2, hd = 64, E = heads * hd;
  for (DType dt : {DType::Float32, DType::BFloat16}) {
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      manual_seed(23);
      const Tensor base = randn({N, L, 3 * E}, TensorOptions(dt));
      Tensor rows = base.clone().requires_grad_(), dense = base.clone().requires_grad_();
      const Tensor proj = rows.transpose(0, 1);
      const Tensor out = packed_causal_attention(proj, heads, 0.125);
      const Tensor ref = packed_causal_attention(dense.transpose(0, 1).contiguous(), heads, 0.125);
      BOOST_TEST((out.shape() == Shape{L, N, E}));
      BOOST_TEST((out.strides() == Shape{E, L * E, 1}));
      BOOST_TEST((ref.strides() == Shape{N * E, E, 1}));
      BOOST_TEST(out.to_vector() == ref.to_vector());
      // The output's gradient N-major too, as batch_first's out_proj hands it back.
      const Tensor w = randn({N, L, E}, TensorOptions(dt));
      Tensor dproj;
      proj.register_hook([&](const Tensor& g) {
        dproj = g;
        return Tensor();
      });
      sum(mul(out.transpose(0, 1), w)).backward();
      sum(mul(ref.transpose(0, 1), w)).backward();
      BOOST_REQUIRE(dproj.defined());
      BOOST_TEST((dproj.strides() == Shape{3 * E, L * 3 * E, 1}));
      BOOST_TEST(rows.grad().to_vector() == dense.grad().to_vector());
    }
  }
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
