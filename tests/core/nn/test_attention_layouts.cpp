// MultiheadAttention's batch_first causal path (GPT's blocks) works in the caller's (N, L) row
// order: the same values and gradients as the (L, N, E) layout on the same data transposed, the
// output dense in (N, L, E), and no transposition copy forward or backward: as many allocations
// as the (L, N, E) layout, which transposes nothing. float32 and bf16 on the CPU; tests/gpu runs
// the same comparison on CUDA.
#include <boost/test/unit_test.hpp>

#include "core/ops.h"
#include "tests/support/causal_attention_layouts.h"

namespace fsdp::testing {
namespace {

void check_layouts_agree(DType dt, double tol) {
  manual_seed(17);
  const std::int64_t N = 3, L = 20, H = 2, E = 2 * 64;
  const TensorOptions options(dt);
  auto batch_first = causal_attention_layer(E, H, true, options);
  auto seq_first = causal_attention_layer(E, H, false, options, batch_first);
  const Tensor x = randn({N, L, E}, options), grad = randn({N, L, E}, options);
  const CausalAttentionRun a = run_causal_attention(*batch_first, x, grad);
  const CausalAttentionRun b = run_causal_attention(*seq_first, x, grad);
  BOOST_TEST_CONTEXT(dtype_name(dt)) {
    BOOST_TEST((a.out.shape() == Shape{N, L, E}));
    BOOST_TEST(a.out_dense);  // no transposed view handed back
    BOOST_TEST(relative_difference(a.out, b.out) <= tol);
    BOOST_TEST(relative_difference(a.grad_x, b.grad_x) <= tol);
    BOOST_REQUIRE_EQUAL(a.grads.size(), 4u);  // in_proj weight and bias, out_proj's
    for (std::size_t i = 0; i < a.grads.size(); ++i)
      BOOST_TEST(relative_difference(a.grads[i], b.grads[i]) <= tol, "parameter " << i);
    // The copies of (L, N, E) activations a transposed layout costs would show here.
    BOOST_TEST(a.allocations == b.allocations);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(attention_layouts)

BOOST_AUTO_TEST_CASE(batch_first_causal_attention_matches_the_sequence_first_layout) {
  check_layouts_agree(DType::Float32, 1e-6);
  check_layouts_agree(DType::BFloat16, 1e-2);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace fsdp::testing
