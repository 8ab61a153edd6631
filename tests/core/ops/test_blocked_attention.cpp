// blocked_attention (core/ops/blocked_attention.h) against the materialised path (bmm, mask,
// softmax, bmm): values and gradients of q, k and v, with sizes that cross the query and key
// blocks, without a mask, with a causal -inf mask shared by the batch and with a per-batch mask;
// MultiheadAttention on a long sequence (blocked) against the same layer returning weights
// (materialised); error messages.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "core/autograd.h"
#include "core/nn/multihead_attention.h"
#include "core/nn/transformer.h"
#include "core/ops.h"
#include "core/ops/blocked_attention.h"
#include "tests/support/error_message.h"

namespace fsdp::testing {
namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto va = a.to_vector(), vb = b.to_vector();
  BOOST_REQUIRE_EQUAL(va.size(), vb.size());
  double worst = 0;
  for (std::size_t i = 0; i < va.size(); ++i) worst = std::max(worst, std::abs(va[i] - vb[i]));
  return worst;
}

struct Grads {
  Tensor out, dq, dk, dv;
};

template <typename Attend>
Grads run(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& w, Attend attend) {
  Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_();
  Tensor v = v0.clone().requires_grad_();
  Tensor out = attend(q, k, v);
  sum(mul(out, w)).backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

void compare(DType dt, std::int64_t B, std::int64_t L, std::int64_t S, const Tensor& mask,
             const std::string& what) {
  manual_seed(11);
  const TensorOptions o(dt);
  Tensor q = randn({B, L, 8}, o), k = randn({B, S, 8}, o), v = randn({B, S, 5}, o);
  Tensor w = randn({B, L, 5}, o);
  Grads got =
      run(q, k, v, w, [&](auto& a, auto& b, auto& c) { return blocked_attention(a, b, c, mask); });
  Grads want = run(q, k, v, w, [&](auto& a, auto& b, auto& c) {
    Tensor s = bmm(a, b.transpose(1, 2));
    if (mask.defined()) s = add(mask, s);
    return bmm(softmax(s, -1), c);
  });
  const double tol = dt == DType::Float32 ? 2e-5 : 1e-11;
  BOOST_TEST_CONTEXT(what << " " << dtype_name(dt)) {
    BOOST_TEST(got.out.shape() == want.out.shape());
    BOOST_TEST(max_abs_diff(got.out, want.out) <= tol);
    BOOST_TEST(max_abs_diff(got.dq, want.dq) <= tol);
    BOOST_TEST(max_abs_diff(got.dk, want.dk) <= tol);
    BOOST_TEST(max_abs_diff(got.dv, want.dv) <= tol);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(blocked_attention_op)

BOOST_AUTO_TEST_CASE(matches_the_materialised_path) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    const TensorOptions o(dt);
    compare(dt, 2, 70, 150, Tensor(), "no mask");
    compare(dt, 1, 1, 1, Tensor(), "one query, one key");
    compare(dt, 2, 130, 130, nn::Transformer::generate_square_subsequent_mask(130, o),
            "causal (L, S) mask");
    manual_seed(5);
    compare(dt, 3, 65, 129, randn({3, 65, 129}, o), "(B, L, S) mask");
    compare(dt, 3, 65, 129, randn({1, 65, 129}, o), "(1, L, S) mask");
  }
}

BOOST_AUTO_TEST_CASE(multihead_attention_uses_it_for_long_sequences) {
  manual_seed(2);
  const std::int64_t L = kBlockedAttentionMinKeys + 20;
  nn::MultiheadAttention mha(16, 2, nn::MultiheadAttentionOptions{.batch_first = true});
  Tensor x = randn({2, L, 16});
  Tensor mask = nn::Transformer::generate_square_subsequent_mask(L);
  auto forward = [&](bool need_weights) {
    mha.zero_grad();
    Tensor xi = x.clone().requires_grad_();
    nn::AttentionArgs a;
    a.need_weights = need_weights;  // weights force the materialised path
    a.attn_mask = mask;
    Tensor out = mha.forward(xi, xi, xi, a).first;
    sum(mul(out, out)).backward();
    return std::pair{out.detach(), xi.grad()};
  };
  auto [blocked_out, blocked_grad] = forward(false);
  Tensor w_grad = mha.param("in_proj_weight").grad().clone();
  auto [full_out, full_grad] = forward(true);
  BOOST_TEST(max_abs_diff(blocked_out, full_out) <= 1e-5);
  BOOST_TEST(max_abs_diff(blocked_grad, full_grad) <= 1e-4);
  BOOST_TEST(max_abs_diff(w_grad, mha.param("in_proj_weight").grad()) <= 1e-3);
}

BOOST_AUTO_TEST_CASE(errors_name_the_shapes) {
  auto message = [](auto&& fn) { return testing::error_message(fn); };
  BOOST_TEST(message([] {
               blocked_attention(zeros({2, 3, 4}), zeros({2, 5, 3}), zeros({2, 5, 2}), Tensor());
             }) ==
             "blocked_attention: expected q (B, L, D), k (B, S, D) and v (B, S, Dv), got shapes "
             "[2, 3, 4], [2, 5, 3] and [2, 5, 2]");
  BOOST_TEST(
      message([] {
        blocked_attention(zeros({2, 3, 4}), zeros({2, 5, 4}), zeros({2, 5, 2}), zeros({4, 5}));
      }) ==
      "blocked_attention: mask of shape [4, 5] does not fit scores of shape (2, 3, 5); "
      "expected (L, S), (1, L, S) or (B, L, S)");
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace fsdp::testing
