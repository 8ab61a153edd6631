// masked_softmax against softmax(add(mask, scores), -1): bit-identical values and gradients for
// (L, S), (1, L, S) and (B, L, S) masks with -inf entries, in float32 and float64; errors.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/functional/masked_softmax.h"
#include "core/nn/transformer.h"
#include "core/ops.h"
#include "tests/support/error_message.h"

namespace fsdp::testing {
namespace {

void compare(DType dt, const Tensor& mask, const std::string& what) {
  manual_seed(4);
  const TensorOptions o(dt);
  Tensor base = randn({3, 5, 7}, o), w = randn({3, 5, 7}, o);
  Tensor a = base.clone().requires_grad_(), b = base.clone().requires_grad_();
  Tensor got = masked_softmax(a, mask), want = softmax(add(mask, b), -1);
  sum(mul(got, w)).backward();
  sum(mul(want, w)).backward();
  BOOST_TEST_CONTEXT(what << " " << dtype_name(dt)) {
    // Same sums, same row kernel: equal to the bit (NaN rows compare as NaN on both sides).
    auto eq = [](const std::vector<double>& x, const std::vector<double>& y) {
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i)
        if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
      return true;
    };
    BOOST_TEST(eq(got.to_vector(), want.to_vector()));
    BOOST_TEST(eq(a.grad().to_vector(), b.grad().to_vector()));
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(masked_softmax_op)

BOOST_AUTO_TEST_CASE(equals_softmax_of_the_sum) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    const TensorOptions o(dt);
    Tensor causal = nn::Transformer::generate_square_subsequent_mask(7, o).narrow(0, 2, 5);
    compare(dt, causal, "(L, S) causal");
    compare(dt, causal.unsqueeze(0), "(1, L, S) causal");
    manual_seed(9);
    compare(dt, randn({3, 5, 7}, o), "(B, L, S)");
  }
}

BOOST_AUTO_TEST_CASE(errors_name_the_shapes) {
  auto message = [](auto&& fn) { return testing::error_message(fn); };
  BOOST_TEST(message([] {
               masked_softmax(zeros({2, 3, 4}), zeros({2, 4}));
             }) ==
             "masked_softmax: mask of shape [2, 4] does not fit scores of shape [2, 3, 4]; "
             "expected (L, S), (1, L, S) or (B, L, S)");
  BOOST_TEST(message([] {
               masked_softmax(zeros({3, 4}), zeros({3, 4}));
             }) ==
             "masked_softmax: expected floating-point scores (B, L, S) and a mask of their "
             "dtype, got scores float32 of shape [3, 4] and mask [3, 4]");
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace fsdp::testing
