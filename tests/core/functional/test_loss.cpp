// cross_entropy, nll_loss and mse_loss against PyTorch (all reductions, ignore_index, label
// smoothing, spatial and 1-D inputs), finite differences, errors, meta shapes.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "core/warnings.h"
#include "tests/core/functional/functional_check.h"

using namespace fsdp;
using namespace fsdp::testing;

BOOST_AUTO_TEST_SUITE(loss_ops)

BOOST_AUTO_TEST_CASE(cross_entropy_matches_pytorch) {
  Fixture fx("functional_loss.json");
  for (std::string red : {"mean", "sum", "none"})
    check_case_both(fx, "cross_entropy_2d_" + red, {"x", "t"}, {"x"}, [red](const Inputs& in) {
      return cross_entropy(in.at("x"), in.at("t"), -100, red);
    });
  check_case_both(fx, "cross_entropy_ignore_mean", {"x", "t"}, {"x"},
                  [](const Inputs& in) { return cross_entropy(in.at("x"), in.at("t")); });
  check_case_both(fx, "cross_entropy_ignore3_smooth_mean", {"x", "t"}, {"x"}, [](const Inputs& in) {
    return cross_entropy(in.at("x"), in.at("t"), 3, "mean", 0.1);
  });
  for (std::string red : {"sum", "none"})
    check_case_both(fx, "cross_entropy_smooth_" + red, {"x", "t"}, {"x"}, [red](const Inputs& in) {
      return cross_entropy(in.at("x"), in.at("t"), 3, red, 0.25);
    });
  check_case_both(fx, "cross_entropy_spatial_mean", {"x", "t"}, {"x"}, [](const Inputs& in) {
    return cross_entropy(in.at("x"), in.at("t"), -100, "mean", 0.05);
  });
  check_case_both(fx, "cross_entropy_spatial_none", {"x", "t"}, {"x"}, [](const Inputs& in) {
    return cross_entropy(in.at("x"), in.at("t"), -100, "none");
  });
  check_case_both(fx, "cross_entropy_1d", {"x", "t"}, {"x"},
                  [](const Inputs& in) { return cross_entropy(in.at("x"), in.at("t")); });
}

BOOST_AUTO_TEST_CASE(nll_and_mse_match_pytorch) {
  Fixture fx("functional_loss.json");
  check_case_both(fx, "nll_loss_mean_ignore", {"x", "t"}, {"x"},
                  [](const Inputs& in) { return nll_loss(in.at("x"), in.at("t")); });
  check_case_both(fx, "nll_loss_sum", {"x", "t"}, {"x"},
                  [](const Inputs& in) { return nll_loss(in.at("x"), in.at("t"), -100, "sum"); });
  check_case_both(fx, "nll_loss_spatial_none", {"x", "t"}, {"x"},
                  [](const Inputs& in) { return nll_loss(in.at("x"), in.at("t"), -100, "none"); });
  for (std::string red : {"mean", "sum", "none"})
    check_case_both(fx, "mse_loss_" + red, {"x", "t"}, {"x", "t"},
                    [red](const Inputs& in) { return mse_loss(in.at("x"), in.at("t"), red); });
}

BOOST_AUTO_TEST_CASE(finite_differences) {
  Tensor t2 = from_vector(std::vector<std::int64_t>{2, 0, 3}, {3});
  Tensor ts = from_vector(std::vector<std::int64_t>{0, 1, -100, 2, 1, 0}, {2, 3});
  for (std::string red : {"mean", "sum", "none"}) {
    gradcheck("cross_entropy " + red, {{"x", det_values({3, 4}, 2.0)}}, {"x"},
              [&](const Inputs& i) { return cross_entropy(i.at("x"), t2, -100, red, 0.2); });
    gradcheck("cross_entropy spatial " + red, {{"x", det_values({2, 3, 3}, 1.5)}}, {"x"},
              [&](const Inputs& i) { return cross_entropy(i.at("x"), ts, -100, red, 0.1); });
    gradcheck("nll_loss " + red, {{"x", det_values({2, 3, 3}, 1.5)}}, {"x"},
              [&](const Inputs& i) { return nll_loss(i.at("x"), ts, -100, red); });
    gradcheck("mse_loss " + red, {{"x", det_values({3, 4})}, {"t", det_values({3, 4}, 1, 2)}},
              {"x", "t"}, [&](const Inputs& i) { return mse_loss(i.at("x"), i.at("t"), red); });
  }
}

BOOST_AUTO_TEST_CASE(all_targets_ignored_gives_nan_mean) {
  Tensor x = det_values({2, 3});
  Tensor t = from_vector(std::vector<std::int64_t>{-100, -100}, {2});
  BOOST_TEST(std::isnan(cross_entropy(x, t).item()));
  BOOST_TEST(cross_entropy(x, t, -100, "sum").item() == 0.0);
}

BOOST_AUTO_TEST_CASE(mse_loss_broadcast_warns) {
  WarningCapture cap;
  Tensor x = det_values({3, 4}), t = det_values({4}, 1, 2);
  Tensor l = mse_loss(x, t, "sum");
  BOOST_TEST(cap.contains("different to the input size"));
  double expected = 0;
  auto xv = x.to_vector(), tv = t.to_vector();
  for (std::size_t i = 0; i < xv.size(); ++i) expected += std::pow(xv[i] - tv[i % 4], 2);
  BOOST_TEST(std::abs(l.item() - expected) < 1e-12);
}

BOOST_AUTO_TEST_CASE(errors) {
  Tensor x = zeros({3, 4});
  check_throws<IndexError>(
      [&] {
        cross_entropy(x, from_vector(std::vector<std::int64_t>{0, 7, 1}, {3}));
      },
      {"cross_entropy", "target 7 is out of bounds", "4"});
  check_throws<IndexError>(
      [&] {
        nll_loss(x, from_vector(std::vector<std::int64_t>{0, -1, 1}, {3}));
      },
      {"nll_loss", "target -1"});
  check_throws<ValueError>(
      [&] {
        cross_entropy(x, from_vector(std::vector<std::int64_t>{0, 1}, {2}));
      },
      {"batch_size (3)", "batch_size (2)"});
  check_throws<RuntimeError>(
      [&] {
        cross_entropy(zeros({2, 3, 4}), zeros({2, 5}, DType::Int64));
      },
      {"expected target size [2, 4], got [2, 5]"});
  check_throws<RuntimeError>([&] { cross_entropy(x, zeros({3}, DType::Int32)); },
                             {"int64", "int32"});
  check_throws<ValueError>([&] { cross_entropy(x, zeros({3}, DType::Int64), -100, "avg"); },
                           {"'avg' is not a valid value for reduction"});
  check_throws<ValueError>([&] { mse_loss(x, x, "max"); }, {"mse_loss", "'max'"});
  check_throws<RuntimeError>([&] { cross_entropy(x, zeros({3}, DType::Int64), -100, "mean", 1.5); },
                             {"label_smoothing"});
}

BOOST_AUTO_TEST_CASE(meta_shapes) {
  Tensor x = empty({4, 10, 6}, TensorOptions(DType::Float32, kMeta));
  Tensor t = empty({4, 6}, TensorOptions(DType::Int64, kMeta));
  BOOST_TEST(cross_entropy(x, t).shape() == Shape{});
  BOOST_TEST(cross_entropy(x, t).is_meta());
  BOOST_TEST(cross_entropy(x, t, -100, "none").shape() == (Shape{4, 6}));
  BOOST_TEST(nll_loss(x, t, -100, "none").shape() == (Shape{4, 6}));
  Tensor y = mse_loss(x, x, "none");
  BOOST_TEST(y.is_meta());
  BOOST_TEST(y.shape() == (Shape{4, 10, 6}));
  BOOST_TEST(mse_loss(x, x).shape() == Shape{});
}

BOOST_AUTO_TEST_CASE(bfloat16_cross_entropy) {
  Tensor x = det_values({3, 5}, 2.0);
  Tensor t = from_vector(std::vector<std::int64_t>{4, 0, 2}, {3});
  Tensor ref = cross_entropy(converted(x, DType::Float32), t);
  Tensor xb = converted(x, DType::BFloat16);
  xb.requires_grad_(true);
  Tensor l = cross_entropy(xb, t);
  BOOST_TEST(l.dtype() == DType::BFloat16);
  BOOST_TEST(std::abs(l.item() - ref.item()) < 2e-2);
  l.backward();
  BOOST_TEST(xb.grad().dtype() == DType::BFloat16);
}

BOOST_AUTO_TEST_SUITE_END()
