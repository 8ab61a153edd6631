// layer_norm and batch_norm against PyTorch (outputs, input/weight/bias gradients, running stats
// after a training step), finite differences, errors, meta shapes.
#include <boost/test/unit_test.hpp>

#include "tests/core/functional/functional_check.h"

using namespace fsdp;
using namespace fsdp::testing;

BOOST_AUTO_TEST_SUITE(layer_norm_op)

BOOST_AUTO_TEST_CASE(matches_pytorch) {
  Fixture fx("functional_norm.json");
  check_case_both(fx, "layer_norm_2d", {"x", "w", "b"}, {"x", "w", "b"}, [](const Inputs& in) {
    return layer_norm(in.at("x"), {6}, in.at("w"), in.at("b"), 1e-5);
  });
  check_case_both(fx, "layer_norm_3d_2dims", {"x", "w", "b"}, {"x", "w", "b"},
                  [](const Inputs& in) {
                    return layer_norm(in.at("x"), {3, 4}, in.at("w"), in.at("b"), 1e-5);
                  });
  check_case_both(fx, "layer_norm_no_affine", {"x"}, {"x"}, [](const Inputs& in) {
    return layer_norm(in.at("x"), {4}, Tensor(), Tensor(), 1e-3);
  });
}

BOOST_AUTO_TEST_CASE(finite_differences) {
  Inputs in{{"x", det_values({3, 2, 4}, 1.3)},
            {"w", det_values({2, 4}, 0.8, 1.0)},
            {"b", det_values({2, 4}, 0.5, 2.0)}};
  gradcheck("layer_norm affine", in, {"x", "w", "b"}, [](const Inputs& i) {
    return layer_norm(i.at("x"), {2, 4}, i.at("w"), i.at("b"), 1e-5);
  });
  gradcheck("layer_norm weight only", {{"x", det_values({4, 5}, 2.0)}, {"w", det_values({5})}},
            {"x", "w"},
            [](const Inputs& i) { return layer_norm(i.at("x"), {5}, i.at("w"), Tensor(), 1e-5); });
}

BOOST_AUTO_TEST_CASE(shape_errors_name_both_shapes) {
  Tensor x = zeros({2, 3});
  check_throws<RuntimeError>([&] { layer_norm(x, {4}); }, {"layer_norm", "[4]", "[2, 3]"});
  check_throws<RuntimeError>([&] { layer_norm(x, {2, 4}); }, {"[2, 4]", "[2, 3]"});
  check_throws<RuntimeError>([&] { layer_norm(x, {3}, zeros({4})); },
                             {"layer_norm", "weight", "[4]", "[3]"});
  check_throws<RuntimeError>(
      [&] {
        layer_norm(x, {3}, Tensor(), zeros({2, 3}));
      },
      {"bias", "[2, 3]", "[3]"});
}

BOOST_AUTO_TEST_CASE(meta_and_16bit) {
  Tensor m = empty({5, 2, 8}, TensorOptions(DType::Float16, kMeta));
  Tensor y = layer_norm(m, {8}, empty({8}, TensorOptions(DType::Float16, kMeta)));
  BOOST_TEST(y.is_meta());
  BOOST_TEST(y.shape() == (Shape{5, 2, 8}));
  BOOST_TEST(y.dtype() == DType::Float16);

  Tensor x = det_values({3, 8}, 2.0);
  Tensor ref = layer_norm(converted(x, DType::Float32), {8});
  Tensor yb = layer_norm(converted(x, DType::BFloat16), {8});
  BOOST_TEST(yb.dtype() == DType::BFloat16);
  BOOST_TEST(close(yb, ref, 2e-2, 2e-2, "bf16 layer_norm") == "");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(batch_norm_op)

// Runs a fixture case with or without affine parameters, then checks the running stats.
void bn_case(const Fixture& fx, const std::string& c, bool training, double momentum, bool affine) {
  for (DType d : {DType::Float64, DType::Float32}) {
    std::vector<std::string> names{"x", "rm", "rv"}, diff{"x"};
    if (affine) {
      names.insert(names.end(), {"w", "b"});
      diff.insert(diff.end(), {"w", "b"});
    }
    Inputs after = check_case(fx, c, d, names, diff, [&](const Inputs& in) {
      return batch_norm(in.at("x"), in.at("rm"), in.at("rv"), affine ? in.at("w") : Tensor(),
                        affine ? in.at("b") : Tensor(), training, momentum, 1e-5);
    });
    const std::string sfx = dtype_suffix(d);
    BOOST_TEST(close(after.at("rm"), fx.tensor(c, "rm_after_" + sfx), rtol_for(d), atol_for(d),
                     c + " running_mean") == "");
    BOOST_TEST(close(after.at("rv"), fx.tensor(c, "rv_after_" + sfx), rtol_for(d), atol_for(d),
                     c + " running_var") == "");
  }
}

BOOST_AUTO_TEST_CASE(matches_pytorch) {
  Fixture fx("functional_norm.json");
  bn_case(fx, "batch_norm_train_2d", true, 0.1, true);
  bn_case(fx, "batch_norm_train_3d", true, 0.1, true);
  bn_case(fx, "batch_norm_train_4d", true, 0.1, true);
  bn_case(fx, "batch_norm_train_5d", true, 0.3, true);
  bn_case(fx, "batch_norm_train_no_affine", true, 0.1, false);
  bn_case(fx, "batch_norm_eval_3d", false, 0.1, true);
}

BOOST_AUTO_TEST_CASE(running_stats_use_unbiased_variance) {
  // One channel, values 1, 2, 3, 4: mean 2.5, biased var 1.25, unbiased var 5/3.
  Tensor x = from_vector(std::vector<double>{1, 2, 3, 4}, {4, 1}, TensorOptions(DType::Float64));
  Tensor rm = zeros({1}, DType::Float64), rv = ones({1}, DType::Float64);
  Tensor y = batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.5, 0.0);
  BOOST_TEST(std::abs(rm.item() - 1.25) < 1e-12);
  BOOST_TEST(std::abs(rv.item() - (0.5 + 0.5 * 5.0 / 3.0)) < 1e-12);
  BOOST_TEST(std::abs(y.to_vector()[0] - (1 - 2.5) / std::sqrt(1.25)) < 1e-12);
  // Eval uses the running stats and leaves them alone.
  Tensor ye = batch_norm(x, rm, rv, Tensor(), Tensor(), false, 0.5, 0.0);
  BOOST_TEST(std::abs(ye.to_vector()[3] - (4 - 1.25) / std::sqrt(rv.item())) < 1e-12);
  BOOST_TEST(std::abs(rm.item() - 1.25) < 1e-12);
}

BOOST_AUTO_TEST_CASE(finite_differences) {
  Inputs in{{"x", det_values({3, 2, 4}, 1.3)},
            {"w", det_values({2}, 0.8, 1.0)},
            {"b", det_values({2}, 0.5, 2.0)}};
  // Training without running stats, so repeated evaluations see the same function.
  gradcheck("batch_norm train", in, {"x", "w", "b"}, [](const Inputs& i) {
    return batch_norm(i.at("x"), Tensor(), Tensor(), i.at("w"), i.at("b"), true, 0.1, 1e-5);
  });
  Tensor rm = det_values({2}, 0.2), rv = full({2}, 1.7, DType::Float64);
  gradcheck("batch_norm eval", in, {"x", "w", "b"}, [rm, rv](const Inputs& i) {
    return batch_norm(i.at("x"), rm, rv, i.at("w"), i.at("b"), false, 0.1, 1e-5);
  });
  gradcheck("batch_norm 4d", {{"x", det_values({2, 3, 2, 2}, 2.0)}}, {"x"}, [](const Inputs& i) {
    return batch_norm(i.at("x"), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
  });
}

BOOST_AUTO_TEST_CASE(errors_and_meta) {
  check_throws<ValueError>(
      [] {
        batch_norm(zeros({1, 3}), zeros({3}), ones({3}), Tensor(), Tensor(), true, 0.1, 1e-5);
      },
      {"batch_norm", "more than 1 value per channel", "[1, 3]"});
  check_throws<RuntimeError>(
      [] {
        batch_norm(zeros({2, 3}), zeros({4}), ones({3}), Tensor(), Tensor(), true, 0.1, 1e-5);
      },
      {"running_mean", "3", "[4]"});
  check_throws<RuntimeError>(
      [] {
        batch_norm(zeros({2, 3}), Tensor(), Tensor(), Tensor(), Tensor(), false, 0.1, 1e-5);
      },
      {"evaluation mode"});
  check_throws<ValueError>(
      [] { batch_norm(zeros({3}), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5); },
      {"batch_norm", "[3]"});
  Tensor m = empty({4, 3, 5, 5}, TensorOptions(DType::Float32, kMeta));
  Tensor rm = empty({3}, TensorOptions(DType::Float32, kMeta));
  Tensor y = batch_norm(m, rm, rm, rm, rm, true, 0.1, 1e-5);
  BOOST_TEST(y.is_meta());
  BOOST_TEST(y.shape() == (Shape{4, 3, 5, 5}));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(norm_16bit)

// float16 input with float32 running stats and affine parameters (torch's mixed-precision
// layout): computed in float32, output and input gradient in float16, parameter gradients and
// running stats in float32.
BOOST_AUTO_TEST_CASE(batch_norm_half_input_float_stats) {
  Tensor x = det_values({4, 3, 2}, 1.5);
  Tensor rm32 = zeros({3}), rv32 = ones({3});
  Tensor ref =
      batch_norm(converted(x, DType::Float32), rm32, rv32, Tensor(), Tensor(), true, 0.1, 1e-5);
  Tensor xh = converted(x, DType::Float16);
  xh.requires_grad_(true);
  Tensor w = ones({3}), b = zeros({3});
  w.requires_grad_(true);
  Tensor rm = zeros({3}), rv = ones({3});
  Tensor y = batch_norm(xh, rm, rv, w, b, true, 0.1, 1e-5);
  BOOST_TEST(y.dtype() == DType::Float16);
  BOOST_TEST(close(y, ref, 2e-3, 2e-3, "fp16 batch_norm") == "");
  BOOST_TEST(close(rm, rm32, 1e-3, 1e-4, "running_mean") == "");
  BOOST_TEST(close(rv, rv32, 1e-3, 1e-4, "running_var") == "");
  y.backward(ones({4, 3, 2}, DType::Float16));
  BOOST_TEST(xh.grad().dtype() == DType::Float16);
  BOOST_TEST(w.grad().dtype() == DType::Float32);
  for (double v : xh.grad().to_vector()) BOOST_TEST(std::abs(v) < 1e-2);  // d sum(xhat) / dx = 0
}

BOOST_AUTO_TEST_CASE(embedding_bfloat16_weight) {
  Tensor w = converted(det_values({5, 2}), DType::BFloat16);
  w.requires_grad_(true);
  Tensor idx = from_vector(std::vector<std::int64_t>{4, 4, 0}, {3});
  Tensor y = embedding(w, idx);
  BOOST_TEST(y.dtype() == DType::BFloat16);
  auto wv = w.detach().to_vector(), yv = y.to_vector();
  BOOST_TEST(yv[0] == wv[8]);
  BOOST_TEST(yv[5] == wv[1]);
  y.backward(ones({3, 2}, DType::BFloat16));
  BOOST_TEST(w.grad().dtype() == DType::BFloat16);
  auto g = w.grad().to_vector();
  BOOST_TEST(g[8] == 2.0);
  BOOST_TEST(g[0] == 1.0);
  BOOST_TEST(g[2] == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()
