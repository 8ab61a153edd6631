// split_heads (core/ops/attention_heads.h) against the unfused path it replaces in
// MultiheadAttention (narrow, contiguous, view, transpose, scale): values and gradients, with one
// part unused (its gradient undefined), in float32 and float64; and its error messages.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/ops/attention_heads.h"
#include "tests/support/error_message.h"

namespace fsdp::testing {
namespace {

// The reference: part p of packed (L, N, parts*E) as (N*H, L, hd), part 0 divided by `div`.
Tensor unfused_part(const Tensor& packed, std::int64_t p, std::int64_t parts, std::int64_t heads,
                    double div) {
  const std::int64_t L = packed.size(0), N = packed.size(1), E = packed.size(2) / parts;
  Tensor t = packed.narrow(-1, p * E, E).contiguous().view({L, N * heads, E / heads});
  t = t.transpose(0, 1);
  return p == 0 ? fsdp::div(t, div) : t;
}

void check_equal(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_TEST(a.shape() == b.shape());
    auto va = a.to_vector(), vb = b.to_vector();
    BOOST_REQUIRE_EQUAL(va.size(), vb.size());
    double worst = 0;
    for (std::size_t i = 0; i < va.size(); ++i) worst = std::max(worst, std::abs(va[i] - vb[i]));
    BOOST_TEST(worst <= tol);
  }
}

void compare(DType dt, std::int64_t L, std::int64_t N, std::int64_t parts, std::int64_t heads,
             std::int64_t hd, double div, bool skip_middle) {
  manual_seed(7);
  Tensor base = randn({L, N, parts * heads * hd}, TensorOptions(dt));
  Tensor a = base.clone().requires_grad_();
  Tensor b = base.clone().requires_grad_();
  std::vector<Tensor> fused = split_heads(a, parts, heads, div);
  BOOST_REQUIRE_EQUAL(fused.size(), static_cast<std::size_t>(parts));
  Tensor loss_a = zeros({}, TensorOptions(dt)), loss_b = zeros({}, TensorOptions(dt));
  for (std::int64_t p = 0; p < parts; ++p) {
    Tensor ref = unfused_part(b, p, parts, heads, div);
    check_equal(fused[static_cast<std::size_t>(p)], ref, 0.0, "part " + std::to_string(p));
    if (skip_middle && p == 1) continue;
    // Different weights per element and part so a misplaced gradient shows.
    Tensor w = randn(ref.shape(), TensorOptions(dt));
    loss_a = add(loss_a, sum(mul(fused[static_cast<std::size_t>(p)], w)));
    loss_b = add(loss_b, sum(mul(ref, w)));
  }
  loss_a.backward();
  loss_b.backward();
  // 16-bit: the same float division rounded once on both paths, so equal.
  const double tol = dt == DType::Float32 ? 1e-6 : dt == DType::Float64 ? 1e-14 : 0.0;
  check_equal(a.grad(), b.grad(), tol, "gradient");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(attention_heads)

BOOST_AUTO_TEST_CASE(split_heads_matches_the_unfused_path) {
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16}) {
    compare(dt, 5, 3, 3, 4, 8, std::sqrt(8.0), false);
    compare(dt, 5, 3, 3, 4, 8, std::sqrt(8.0), true);  // k unused: undefined gradient
    compare(dt, 1, 1, 1, 1, 3, 1.0, false);
    compare(dt, 7, 2, 2, 3, 5, 3.0, false);
  }
}

BOOST_AUTO_TEST_CASE(split_heads_reads_non_contiguous_input) {
  manual_seed(3);
  Tensor t = randn({2, 4, 12});
  Tensor packed = t.transpose(0, 1);  // (4, 2, 12), not contiguous
  std::vector<Tensor> parts = split_heads(packed, 3, 2, 2.0);
  check_equal(parts[2], unfused_part(packed.contiguous(), 2, 3, 2, 2.0), 0.0, "part 2");
  check_equal(parts[0], unfused_part(packed.contiguous(), 0, 3, 2, 2.0), 0.0, "part 0");
}

BOOST_AUTO_TEST_CASE(split_heads_errors_name_the_shape) {
  auto message = [](auto&& fn) { return testing::error_message(fn); };
  BOOST_TEST(message([] {
               split_heads(zeros({2, 3, 10}), 3, 2);
             }) ==
             "split_heads: expected packed (L, N, parts * heads * head_dim), got shape [2, 3, 10] "
             "for 3 parts of 2 heads");
  BOOST_TEST(message([] {
               split_heads(zeros({2, 3, 6}, TensorOptions(DType::Int64)), 3, 1);
             }) ==
             "split_heads: not implemented for dtype int64 (shape [2, 3, 6]); expected a floating "
             "dtype");
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace fsdp::testing
