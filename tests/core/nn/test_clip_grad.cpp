// clip_grad_norm_ and clip_grad_value_ (torch.nn.utils) on values worked out by hand.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>

#include "core/nn/clip_grad.h"
#include "core/ops.h"

using namespace fsdp;
using namespace fsdp::nn;

namespace {

bool message_is(const std::exception& e, const std::string& text) {
  return e.what() == text;
}

// A parameter of `values` whose .grad is `grad` (same shape), float32 unless told.
Tensor param_with_grad(const std::vector<double>& grad, const Shape& shape,
                       DType dtype = DType::Float32) {
  Tensor p = zeros(shape, dtype).requires_grad_();
  p.set_grad(from_vector(grad, shape, dtype));
  return p;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  BOOST_REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    BOOST_TEST(std::abs(got[i] - want[i]) <= tol,
               "element " << i << ": " << got[i] << " vs " << want[i]);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(clip_grad)

BOOST_AUTO_TEST_CASE(clip_grad_norm_scales_by_max_norm_over_total) {
  // Gradients 3, 4 and 12: 2-norm sqrt(9 + 16 + 144) = 13.
  Tensor a = param_with_grad({3, 4}, {2});
  Tensor b = param_with_grad({12}, {1, 1});
  Tensor frozen = zeros({3});  // no .grad: skipped
  Tensor total = clip_grad_norm_({a, frozen, b}, 6.5);
  BOOST_TEST(total.dim() == 0);
  BOOST_TEST(total.dtype() == DType::Float32);
  BOOST_TEST(total.item() == 13.0);
  // clip_coef = 6.5 / (13 + 1e-6), in float32.
  const double coef = static_cast<float>(6.5f / (13.0f + 1e-6f));
  check_close(a.grad().to_vector(), {3 * coef, 4 * coef}, 1e-6);
  check_close(b.grad().to_vector(), {12 * coef}, 1e-6);
  BOOST_TEST(a.grad().to_vector()[0] < 1.5);  // the 1e-6 keeps the result below max_norm
}

BOOST_AUTO_TEST_CASE(clip_coef_is_clamped_to_one) {
  Tensor a = param_with_grad({3, 4}, {2});
  Tensor total = clip_grad_norm_({a}, 100.0);
  BOOST_TEST(total.item() == 5.0);
  BOOST_TEST(a.grad().to_vector() == (std::vector<double>{3, 4}));
}

BOOST_AUTO_TEST_CASE(norm_types_inf_one_and_three) {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor a = param_with_grad({3, -4}, {2}, DType::Float64);
  Tensor b = param_with_grad({-12}, {1}, DType::Float64);
  BOOST_TEST(get_total_norm({a.grad(), b.grad()}, inf).item() == 12.0);
  BOOST_TEST(get_total_norm({a.grad(), b.grad()}, -inf).item() == 3.0);
  BOOST_TEST(get_total_norm({a.grad(), b.grad()}, 1.0).item() == 19.0);
  // Order 0 is the order-0 norm of the per-tensor norms: the number of non-zero gradients.
  BOOST_TEST(get_total_norm({a.grad(), b.grad(), zeros({2}, DType::Float64)}, 0.0).item() == 2.0);
  const double three = std::cbrt(27.0 + 64.0 + 1728.0);
  BOOST_TEST(std::abs(get_total_norm({a.grad(), b.grad()}, 3.0).item() - three) < 1e-12);

  Tensor total = clip_grad_norm_({a, b}, 6.0, inf);
  BOOST_TEST(total.dtype() == DType::Float64);
  BOOST_TEST(total.item() == 12.0);
  const double coef = 6.0 / (12.0 + 1e-6);
  BOOST_TEST(a.grad().to_vector() == (std::vector<double>{3 * coef, -4 * coef}));
  BOOST_TEST(b.grad().to_vector() == (std::vector<double>{-12 * coef}));
}

BOOST_AUTO_TEST_CASE(partial_norms_of_shards_combine_to_the_total) {
  // Two "ranks" each holding part of the gradients (as FSDP shards): combining their partial
  // norms gives the norm of the whole.
  Tensor whole = from_vector({1, -2, 3, 4, -5, 6, 0.5}, {7}, DType::Float64);
  Tensor shard0 = whole.narrow(0, 0, 4), shard1 = whole.narrow(0, 4, 3);
  const double inf = std::numeric_limits<double>::infinity();
  const double sum2 = norm_partial({shard0}, 2.0) + norm_partial({shard1}, 2.0);
  BOOST_TEST(sum2 == 1 + 4 + 9 + 16 + 25 + 36 + 0.25);
  BOOST_TEST(std::abs(std::sqrt(sum2) - get_total_norm({whole}).item()) < 1e-12);
  BOOST_TEST(std::max(norm_partial({shard0}, inf), norm_partial({shard1}, inf)) == 6.0);
  BOOST_TEST(std::min(norm_partial({shard0}, -inf), norm_partial({shard1}, -inf)) == 0.5);
  BOOST_TEST(norm_partial({}, 2.0) == 0.0);
}

BOOST_AUTO_TEST_CASE(no_gradients_give_a_zero_norm) {
  Tensor p = zeros({2}).requires_grad_();
  Tensor total = clip_grad_norm_({p}, 1.0);
  BOOST_TEST(total.dim() == 0);
  BOOST_TEST(total.item() == 0.0);
  BOOST_TEST(clip_grad_norm_({}, 1.0).item() == 0.0);
}

BOOST_AUTO_TEST_CASE(non_finite_norm_is_an_error_only_when_asked) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor a = param_with_grad({1, inf}, {2});
  BOOST_CHECK_EXCEPTION(
      clip_grad_norm_({a}, 1.0, 2.0, /*error_if_nonfinite=*/true), RuntimeError,
      [](const RuntimeError& e) {
        return message_is(e,
                          "The total norm of order 2.0 for gradients from `parameters` is "
                          "non-finite, so it cannot be clipped. To disable this error and scale "
                          "the gradients by the non-finite norm anyway, set "
                          "`error_if_nonfinite=False`");
      });
  BOOST_TEST(a.grad().to_vector()[0] == 1.0);  // untouched when it throws
  Tensor b = param_with_grad({nan, 2}, {2});
  BOOST_CHECK_EXCEPTION(clip_grad_norm_({b}, 1.0, inf, true), RuntimeError,
                        [](const RuntimeError& e) {
                          return std::string(e.what()).starts_with("The total norm of order inf ");
                        });
  // Without the check the norm is returned and the gradients scaled by it (inf -> 0 * inf).
  Tensor total = clip_grad_norm_({a}, 1.0);
  BOOST_TEST(std::isinf(total.item()));
  BOOST_TEST(a.grad().to_vector()[0] == 0.0);
  BOOST_TEST(std::isnan(a.grad().to_vector()[1]));
}

BOOST_AUTO_TEST_CASE(clip_grad_value_clamps_every_element) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor a = param_with_grad({-3, 0.5, 2, -0.25}, {2, 2});
  Tensor b = zeros({2, 3}).requires_grad_();
  // A non-contiguous gradient: the transpose of a [3, 2] tensor.
  b.set_grad(from_vector({5, -5, 1, 7, nan, -0.5}, {3, 2}).t());
  clip_grad_value_({a, b}, 1.0);
  BOOST_TEST(a.grad().to_vector() == (std::vector<double>{-1, 0.5, 1, -0.25}));
  auto g = b.grad().to_vector();  // row-major over the transposed view: 5 1 nan / -5 7 -0.5
  BOOST_TEST(g[0] == 1.0);
  BOOST_TEST(g[1] == 1.0);
  BOOST_TEST(std::isnan(g[2]));
  BOOST_TEST(g[3] == -1.0);
  BOOST_TEST(g[4] == 1.0);
  BOOST_TEST(g[5] == -0.5);
}

BOOST_AUTO_TEST_SUITE_END()
