// softmax / log_softmax against PyTorch, gradients by finite differences, dims, 16-bit, meta.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "tests/core/functional/functional_check.h"

using namespace fsdp;
using namespace fsdp::testing;

BOOST_AUTO_TEST_SUITE(softmax_ops)

BOOST_AUTO_TEST_CASE(matches_pytorch) {
  Fixture fx("functional_softmax.json");
  const std::pair<const char*, std::int64_t> cases[] = {
      {"2d_dim1", 1}, {"3d_dim1", 1}, {"3d_dim0", 0}, {"3d_dimm1", -1}};
  for (auto [name, dim] : cases) {
    const std::int64_t d = dim;
    check_case_both(fx, std::string("softmax_") + name, {"x"}, {"x"},
                    [d](const Inputs& in) { return softmax(in.at("x"), d); });
    check_case_both(fx, std::string("log_softmax_") + name, {"x"}, {"x"},
                    [d](const Inputs& in) { return log_softmax(in.at("x"), d); });
  }
}

BOOST_AUTO_TEST_CASE(finite_differences) {
  for (std::int64_t dim : {0, 1, 2, -1}) {
    gradcheck("softmax dim " + std::to_string(dim), {{"x", det_values({2, 3, 4}, 2.0)}}, {"x"},
              [dim](const Inputs& in) { return softmax(in.at("x"), dim); });
    gradcheck("log_softmax dim " + std::to_string(dim), {{"x", det_values({2, 3, 4}, 2.0)}}, {"x"},
              [dim](const Inputs& in) { return log_softmax(in.at("x"), dim); });
  }
}

BOOST_AUTO_TEST_CASE(numerically_stable_for_large_inputs) {
  Tensor x = from_vector(std::vector<double>{1000.0, 1001.0, 1002.0, -1000.0}, {1, 4});
  auto y = softmax(x, 1).to_vector();
  const double e0 = std::exp(-2.0), e1 = std::exp(-1.0), s = e0 + e1 + 1.0;
  BOOST_TEST(std::abs(y[0] - e0 / s) < 1e-6);
  BOOST_TEST(std::abs(y[2] - 1.0 / s) < 1e-6);
  BOOST_TEST(y[3] == 0.0);
  auto ly = log_softmax(x, 1).to_vector();
  BOOST_TEST(std::abs(ly[2] + std::log(s)) < 1e-4);
  BOOST_TEST(std::isfinite(ly[3]));
  BOOST_TEST(std::abs(ly[3] - (-2002.0 - std::log(s))) < 1e-2);
}

BOOST_AUTO_TEST_CASE(non_contiguous_input) {
  Tensor base = det_values({4, 3}, 1.5);
  Tensor xt = make_view(base, {3, 4}, {1, 3}, 0);  // the transpose, as a strided view
  Tensor xc = from_vector(xt.to_vector(), {3, 4}, TensorOptions(DType::Float64));
  BOOST_TEST(close(softmax(xt, 1), softmax(xc, 1), 1e-12, 1e-14, "strided softmax") == "");
  BOOST_TEST(close(log_softmax(xt, 0), log_softmax(xc, 0), 1e-12, 1e-14, "strided lsm") == "");
}

BOOST_AUTO_TEST_CASE(half_and_bfloat16_compute_in_float32) {
  Tensor x = det_values({3, 5}, 2.0);
  Tensor ref = softmax(converted(x, DType::Float32), 1);
  for (DType d : {DType::Float16, DType::BFloat16}) {
    Tensor xh = converted(x, d);
    xh.requires_grad_(true);
    Tensor y = softmax(xh, 1);
    BOOST_TEST(y.dtype() == d);
    BOOST_TEST(close(y, ref, d == DType::Float16 ? 2e-3 : 1e-2, 1e-3, "16-bit softmax") == "");
    y.backward(ones({3, 5}, TensorOptions(d)));
    BOOST_TEST(xh.grad().dtype() == d);
    for (double v : xh.grad().to_vector()) BOOST_TEST(std::abs(v) < 1e-2);  // rows sum to 1
  }
}

BOOST_AUTO_TEST_CASE(bad_dim_and_meta) {
  Tensor x = zeros({2, 3});
  check_throws<IndexError>([&] { softmax(x, 2); }, {"softmax", "Dimension out of range", "2"});
  check_throws<IndexError>([&] { log_softmax(x, -3); }, {"log_softmax", "-3"});
  check_throws<TypeError>([&] { softmax(zeros({2}, DType::Int64), 0); }, {"softmax", "int64"});
  Tensor m = empty({2, 7, 3}, TensorOptions(DType::BFloat16, kMeta));
  Tensor y = log_softmax(m, 1);
  BOOST_TEST(y.is_meta());
  BOOST_TEST(y.shape() == (Shape{2, 7, 3}));
  BOOST_TEST(y.dtype() == DType::BFloat16);
  BOOST_TEST(softmax(m, -1).is_meta());
}

BOOST_AUTO_TEST_CASE(empty_and_scalar_inputs) {
  Tensor e = zeros({0, 4});
  BOOST_TEST(softmax(e, 1).shape() == (Shape{0, 4}));
  Tensor s = scalar_tensor(3.0);
  BOOST_TEST(softmax(s, 0).item() == 1.0);
  BOOST_TEST(log_softmax(s, -1).item() == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(softmax_long_rows)

// Rows longer than a reduction block (512): float32 must still agree with float64 to 1e-5.
BOOST_AUTO_TEST_CASE(float32_matches_float64) {
  for (auto [shape, dim] : {std::pair<Shape, std::int64_t>{{2, 3000}, 1},
                            std::pair<Shape, std::int64_t>{{3, 1100, 3}, 1}}) {
    Tensor x64 = det_values(shape, 4.0);
    Tensor x32 = converted(x64, DType::Float32);
    BOOST_TEST(close(softmax(x32, dim), softmax(x64, dim), 1e-5, 1e-9, "long softmax") == "");
    BOOST_TEST(close(log_softmax(x32, dim), log_softmax(x64, dim), 1e-5, 1e-5, "long lsm") == "");
    Tensor t =
        from_vector(std::vector<std::int64_t>(static_cast<std::size_t>(shape[0]), 7), {shape[0]});
    if (shape.size() == 2)
      BOOST_TEST(std::abs(cross_entropy(x32, t).item() - cross_entropy(x64, t).item()) < 1e-5);
  }
}

BOOST_AUTO_TEST_SUITE_END()
