// Activations, embedding and dropout: PyTorch fixtures, finite differences, errors, meta,
// dropout's mask statistics and its replay from a restored generator state.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "core/kernels/kernel_table.h"
#include "tests/core/functional/functional_check.h"

using namespace fsdp;
using namespace fsdp::testing;

BOOST_AUTO_TEST_SUITE(activation_ops)

BOOST_AUTO_TEST_CASE(matches_pytorch) {
  Fixture fx("functional_misc.json");
  check_case_both(fx, "relu", {"x"}, {"x"}, [](const Inputs& in) { return relu(in.at("x")); });
  check_case_both(fx, "gelu_none", {"x"}, {"x"}, [](const Inputs& in) { return gelu(in.at("x")); });
  check_case_both(fx, "gelu_tanh", {"x"}, {"x"},
                  [](const Inputs& in) { return gelu(in.at("x"), "tanh"); });
  check_case_both(fx, "tanh", {"x"}, {"x"},
                  [](const Inputs& in) { return fsdp::tanh(in.at("x")); });
  check_case_both(fx, "sigmoid", {"x"}, {"x"},
                  [](const Inputs& in) { return sigmoid(in.at("x")); });
}

BOOST_AUTO_TEST_CASE(finite_differences) {
  // Shifted off the relu kink at 0.
  Tensor x = det_values({3, 5}, 2.0, 0.3);
  gradcheck("relu", {{"x", x}}, {"x"}, [](const Inputs& i) { return relu(i.at("x")); });
  gradcheck("gelu", {{"x", x}}, {"x"}, [](const Inputs& i) { return gelu(i.at("x")); });
  gradcheck("gelu tanh", {{"x", x}}, {"x"},
            [](const Inputs& i) { return gelu(i.at("x"), "tanh"); });
  gradcheck("tanh", {{"x", x}}, {"x"}, [](const Inputs& i) { return fsdp::tanh(i.at("x")); });
  gradcheck("sigmoid", {{"x", x}}, {"x"}, [](const Inputs& i) { return sigmoid(i.at("x")); });
}

BOOST_AUTO_TEST_CASE(relu_on_integers) {
  Tensor x = from_vector(std::vector<std::int64_t>{-3, 0, 5, -1}, {2, 2});
  Tensor y = relu(x);
  BOOST_TEST(y.dtype() == DType::Int64);
  BOOST_TEST(y.to_int_vector() == (std::vector<std::int64_t>{0, 0, 5, 0}));
  Tensor y32 = relu(from_vector(std::vector<std::int64_t>{-7, 7}, {2}, DType::Int32));
  BOOST_TEST(y32.dtype() == DType::Int32);
  BOOST_TEST(y32.to_int_vector() == (std::vector<std::int64_t>{0, 7}));
}

BOOST_AUTO_TEST_CASE(errors_meta_16bit) {
  check_throws<RuntimeError>([] { gelu(zeros({2}), "fast"); }, {"gelu", "'fast'"});
  Tensor m = empty({2, 9}, TensorOptions(DType::Float16, kMeta));
  for (Tensor y : {relu(m), gelu(m), fsdp::tanh(m), sigmoid(m), gelu(m, "tanh")}) {
    BOOST_TEST(y.is_meta());
    BOOST_TEST(y.shape() == (Shape{2, 9}));
    BOOST_TEST(y.dtype() == DType::Float16);
  }
  Tensor x = det_values({4, 4}, 3.0);
  Tensor ref = gelu(converted(x, DType::Float32));
  Tensor yh = gelu(converted(x, DType::Float16));
  BOOST_TEST(yh.dtype() == DType::Float16);
  BOOST_TEST(close(yh, ref, 2e-3, 2e-3, "fp16 gelu") == "");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(embedding_op)

BOOST_AUTO_TEST_CASE(matches_pytorch) {
  Fixture fx("functional_misc.json");
  check_case_both(fx, "embedding", {"w", "i"}, {"w"},
                  [](const Inputs& in) { return embedding(in.at("w"), in.at("i")); });
  check_case_both(fx, "embedding_padding", {"w", "i"}, {"w"},
                  [](const Inputs& in) { return embedding(in.at("w"), in.at("i"), 0); });
}

BOOST_AUTO_TEST_CASE(int32_indices_and_finite_differences) {
  Tensor w = det_values({6, 3});
  Tensor i64 = from_vector(std::vector<std::int64_t>{5, 1, 1, 0}, {2, 2});
  Tensor i32 = from_vector(std::vector<std::int64_t>{5, 1, 1, 0}, {2, 2}, DType::Int32);
  BOOST_TEST(close(embedding(w, i32), embedding(w, i64), 0, 0, "int32 indices") == "");
  BOOST_TEST(embedding(w, i32).shape() == (Shape{2, 2, 3}));
  gradcheck("embedding", {{"w", w}}, {"w"},
            [i64](const Inputs& in) { return embedding(in.at("w"), i64); });
  // The padding row is read in forward (as torch) but gets exactly zero gradient.
  Tensor wl = det_values({6, 3});
  wl.requires_grad_(true);
  embedding(wl, i64, 1).backward(ones({2, 2, 3}, DType::Float64));
  auto g = wl.grad().to_vector();
  for (int j = 0; j < 3; ++j) {
    BOOST_TEST(g[3 + j] == 0.0);   // row 1: padding
    BOOST_TEST(g[15 + j] == 1.0);  // row 5: once
    BOOST_TEST(g[0 + j] == 1.0);   // row 0: once
  }
}

BOOST_AUTO_TEST_CASE(errors_and_meta) {
  Tensor w = zeros({10, 4});
  check_throws<IndexError>(
      [&] {
        embedding(w, from_vector(std::vector<std::int64_t>{3, 10}, {2}));
      },
      {"embedding", "index 10", "10 rows"});
  check_throws<IndexError>([&] { embedding(w, from_vector(std::vector<std::int64_t>{-1}, {1})); },
                           {"index -1"});
  check_throws<TypeError>([&] { embedding(w, zeros({2})); }, {"embedding", "float32"});
  Tensor m = empty({10, 4}, TensorOptions(DType::BFloat16, kMeta));
  Tensor y = embedding(m, empty({3, 5}, TensorOptions(DType::Int64, kMeta)));
  BOOST_TEST(y.is_meta());
  BOOST_TEST(y.shape() == (Shape{3, 5, 4}));
  BOOST_TEST(y.dtype() == DType::BFloat16);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(dropout_op)

BOOST_AUTO_TEST_CASE(identity_zeros_and_scaling) {
  Tensor x = full({1000}, 2.0);
  BOOST_TEST(dropout(x, 0.5, false).is_same(x));
  BOOST_TEST(dropout(x, 0.0, true).is_same(x));
  Tensor xl = full({10}, 2.0);
  xl.requires_grad_(true);
  Tensor z = dropout(xl, 1.0, true);
  for (double v : z.to_vector()) BOOST_TEST(v == 0.0);
  z.backward(ones({10}));
  for (double v : xl.grad().to_vector()) BOOST_TEST(v == 0.0);

  Generator gen(42);
  Tensor y = dropout(x, 0.3, true, &gen);
  int kept = 0;
  for (double v : y.to_vector()) {
    BOOST_TEST((v == 0.0 || std::abs(v - 2.0 / 0.7) < 1e-6));
    kept += v != 0.0;
  }
  BOOST_TEST(std::abs(kept / 1000.0 - 0.7) < 0.05);
  check_throws<ValueError>([&] { dropout(x, 1.5, true); }, {"dropout", "1.5"});
}

BOOST_AUTO_TEST_CASE(generator_state_replays_the_mask) {
  Generator gen(7);
  Tensor x = det_values({8, 16});
  auto state = gen.get_state();
  Tensor a = dropout(x, 0.4, true, &gen);
  BOOST_TEST(!(gen.get_state() == state));
  Tensor b = dropout(x, 0.4, true, &gen);
  BOOST_TEST(close(a, b, 0, 0, "fresh mask") != "");  // the stream moved on
  gen.set_state(state);
  Tensor c = dropout(x, 0.4, true, &gen);
  BOOST_TEST(close(a, c, 0, 0, "replayed mask") == "");
  // This thread's default generator, reseeded, also replays.
  manual_seed(99);
  Tensor d = dropout(x, 0.4, true);
  manual_seed(99);
  Tensor e = dropout(x, 0.4, true);
  BOOST_TEST(close(d, e, 0, 0, "default generator") == "");
}

BOOST_AUTO_TEST_CASE(backward_uses_the_forward_mask) {
  Generator gen(3);
  Tensor x = det_values({5, 7}, 1.0, 0.2);
  x.requires_grad_(true);
  Tensor y = dropout(x, 0.25, true, &gen);
  Tensor gy = det_values({5, 7}, 1.0, 1.1);
  y.backward(gy);
  auto xv = x.detach().to_vector(), yv = y.to_vector(), gv = x.grad().to_vector();
  auto gyv = gy.to_vector();
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const bool kept = yv[i] != 0.0;
    BOOST_TEST(std::abs(gv[i] - (kept ? gyv[i] / 0.75 : 0.0)) < 1e-12, "element " << i);
    if (kept) BOOST_TEST(std::abs(yv[i] - xv[i] / 0.75) < 1e-12);
  }
  // Finite differences with the generator state reset before every evaluation.
  auto state = gen.get_state();
  gradcheck("dropout", {{"x", det_values({4, 4})}}, {"x"}, [&gen, state](const Inputs& in) {
    gen.set_state(state);
    return dropout(in.at("x"), 0.5, true, &gen);
  });
}

BOOST_AUTO_TEST_CASE(meta_and_16bit) {
  Tensor m = empty({3, 4}, TensorOptions(DType::BFloat16, kMeta));
  Tensor y = dropout(m, 0.1, true);
  BOOST_TEST(y.is_meta());
  BOOST_TEST(y.shape() == (Shape{3, 4}));
  Generator gen(1);
  Tensor yh = dropout(full({64}, 1.0, DType::Float16), 0.5, true, &gen);
  BOOST_TEST(yh.dtype() == DType::Float16);
  for (double v : yh.to_vector()) BOOST_TEST((v == 0.0 || v == 2.0));
}

BOOST_AUTO_TEST_SUITE_END()

#include "core/functional/vec_math.h"

BOOST_AUTO_TEST_SUITE(vectorised_math)

// The float approximations behind the fast kernels, swept against libm in double.
BOOST_AUTO_TEST_CASE(accuracy_and_special_values) {
  using namespace fsdp::functional;
  double worst_exp = 0, worst_erf = 0, worst_tanh = 0;
  for (int i = -20000; i <= 20000; ++i) {
    const float x = static_cast<float>(i) * 0.0043f;  // [-86, 86]
    const double e = std::exp(static_cast<double>(x));
    worst_exp = std::max(worst_exp, std::abs(fast_exp(x) - e) / e);
    const float xs = x / 16;  // [-5.4, 5.4]
    worst_erf = std::max(worst_erf, std::abs(fast_erf(xs) - std::erf(double(xs))));
    const double t = std::tanh(double(xs));
    worst_tanh = std::max(worst_tanh, std::abs(fast_tanh(xs) - t) / std::max(std::abs(t), 1e-30));
  }
  BOOST_TEST(worst_exp < 2e-7);
  BOOST_TEST(worst_erf < 5e-7);
  BOOST_TEST(worst_tanh < 3e-7);
  const float inf = std::numeric_limits<float>::infinity();
  BOOST_TEST(fast_exp(-inf) == 0.0f);
  BOOST_TEST(fast_exp(-100.0f) == 0.0f);
  BOOST_TEST(fast_exp(inf) == inf);
  BOOST_TEST(fast_exp(100.0f) == inf);
  BOOST_TEST(std::isnan(fast_exp(std::nanf(""))));
  BOOST_TEST(fast_erf(inf) == 1.0f);
  BOOST_TEST(fast_erf(-inf) == -1.0f);
  BOOST_TEST(fast_tanh(inf) == 1.0f);
  BOOST_TEST(fast_tanh(-inf) == -1.0f);
  BOOST_TEST(std::isnan(fast_tanh(std::nanf(""))));
  BOOST_TEST(fast_tanh(1e-20f) == 1e-20f);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(devices)

// A cuda tensor (metadata only: this build may have no CUDA allocator) is refused by name.
BOOST_AUTO_TEST_CASE(cuda_inputs_throw_not_implemented) {
  // A build with the CUDA table has kernels for cuda: what is refused there is a missing device
  // (tests/core/streams), not missing kernels.
  if (has_kernels(Device(DeviceType::CUDA, 0))) return;
  auto impl = std::make_shared<TensorImpl>();
  impl->set_sizes({2, 3});
  impl->strides = {3, 1};
  impl->device = Device(DeviceType::CUDA, 0);
  Tensor c(impl);
  check_throws<NotImplementedError>([&] { softmax(c, 1); }, {"softmax", "cuda:0"});
  check_throws<NotImplementedError>([&] { gelu(c); }, {"gelu", "cuda:0"});
  check_throws<NotImplementedError>([&] { layer_norm(c, {3}); }, {"layer_norm", "cuda:0"});
  check_throws<NotImplementedError>([&] { dropout(c, 0.5, true); }, {"dropout", "cuda:0"});
  check_throws<NotImplementedError>([&] { cross_entropy(c, zeros({2}, DType::Int64)); },
                                    {"cross_entropy", "cuda:0"});
}

BOOST_AUTO_TEST_SUITE_END()
