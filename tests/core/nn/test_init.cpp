// Initialisation: bounds and moments of each init function and of every layer's default
// initialisation (torch's distributions), gains, fans and their errors.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "core/nn/nn.h"
#include "core/warnings.h"

using namespace fsdp;
using namespace fsdp::nn;

namespace {
struct Moments {
  double min, max, mean, std;
};
Moments moments(const Tensor& t) {
  auto v = t.to_vector();
  Moments m{v[0], v[0], 0, 0};
  for (double x : v) {
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
    m.mean += x;
  }
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.std += (x - m.mean) * (x - m.mean);
  m.std = std::sqrt(m.std / static_cast<double>(v.size() - 1));
  return m;
}

// U(-b, b): inside the bounds, close to them, mean 0 and std b/sqrt(3).
void check_uniform(const Tensor& t, double b) {
  Moments m = moments(t);
  BOOST_TEST(m.min >= -b);
  BOOST_TEST(m.max <= b);
  BOOST_TEST(m.max > 0.95 * b);
  BOOST_TEST(m.min < -0.95 * b);
  BOOST_TEST(std::abs(m.mean) < 0.05 * b);
  BOOST_TEST(std::abs(m.std - b / std::sqrt(3.0)) < 0.05 * b);
}

void check_normal(const Tensor& t, double mean, double std) {
  Moments m = moments(t);
  BOOST_TEST(std::abs(m.mean - mean) < 0.05 * std);
  BOOST_TEST(std::abs(m.std - std) < 0.05 * std);
  BOOST_TEST(m.max - m.min > 6 * std);  // not a uniform: tails
}
}  // namespace

BOOST_AUTO_TEST_CASE(gains_and_fans) {
  BOOST_TEST(init::calculate_gain("linear") == 1.0);
  BOOST_TEST(init::calculate_gain("sigmoid") == 1.0);
  BOOST_TEST(init::calculate_gain("tanh") == 5.0 / 3.0);
  BOOST_TEST(init::calculate_gain("relu") == std::sqrt(2.0));
  BOOST_TEST(init::calculate_gain("leaky_relu") == std::sqrt(2.0 / (1 + 0.01 * 0.01)));
  BOOST_TEST(init::calculate_gain("leaky_relu", std::sqrt(5.0)) == std::sqrt(1.0 / 3.0));
  BOOST_TEST(init::calculate_gain("selu") == 0.75);
  BOOST_CHECK_THROW(init::calculate_gain("swish"), ValueError);
  Tensor w = empty({6, 4, 3, 2});
  auto [fi, fo] = init::calculate_fan_in_and_fan_out(w);
  BOOST_TEST(fi == 24);
  BOOST_TEST(fo == 36);
  BOOST_CHECK_THROW(init::calculate_fan_in_and_fan_out(empty({5})), ValueError);
  BOOST_CHECK_THROW(init::kaiming_uniform_(empty({4, 4}), 0.0, "fan_avg"), ValueError);
}

BOOST_AUTO_TEST_CASE(init_functions) {
  manual_seed(3);
  Tensor t = empty({200, 100});
  init::uniform_(t, -2.0, 3.0);
  Moments m = moments(t);
  BOOST_TEST(m.min >= -2.0);
  BOOST_TEST(m.max < 3.0);
  BOOST_TEST(std::abs(m.mean - 0.5) < 0.05);
  init::normal_(t, 1.0, 0.5);
  check_normal(t, 1.0, 0.5);
  init::xavier_uniform_(t, 2.0);
  check_uniform(t, 2.0 * std::sqrt(6.0 / 300.0));
  init::xavier_normal_(t);
  check_normal(t, 0.0, std::sqrt(2.0 / 300.0));
  init::kaiming_uniform_(t, 0.0, "fan_in", "relu");
  check_uniform(t, std::sqrt(2.0) * std::sqrt(3.0 / 100.0));
  init::kaiming_normal_(t, 0.0, "fan_out", "relu");
  check_normal(t, 0.0, std::sqrt(2.0 / 200.0));
  init::constant_(t, 0.25);
  BOOST_TEST(moments(t).min == 0.25);
  BOOST_TEST(moments(t).max == 0.25);
  // Non-contiguous views are filled in place.
  Tensor d = zeros({4, 6}, TensorOptions(DType::Float64));
  Tensor view = make_view(d, {4, 3}, {6, 2}, 0);
  init::ones_(view);
  init::uniform_(view, 5.0, 6.0);
  auto v = d.to_vector();
  for (int i = 0; i < 24; ++i) BOOST_TEST((i % 2 ? v[i] == 0.0 : v[i] >= 5.0));
  // Same seed, same values; meta tensors are left alone; zero-element tensors warn.
  manual_seed(7);
  Tensor a = init::normal_(empty({10}));
  manual_seed(7);
  Tensor b = init::normal_(empty({10}));
  BOOST_TEST(a.to_vector() == b.to_vector());
  BOOST_TEST(
      init::xavier_uniform_(empty({1000, 1000}, TensorOptions(DType::Float32, kMeta))).is_meta());
  WarningCapture cap;
  init::kaiming_uniform_(empty({0, 3}));
  BOOST_TEST(cap.contains("Initializing zero-element tensors is a no-op"));
}

BOOST_AUTO_TEST_CASE(layer_default_distributions) {
  manual_seed(11);
  Linear lin(400, 300);
  check_uniform(lin.param("weight"), 1.0 / 20.0);
  {
    Moments m = moments(lin.param("bias"));
    BOOST_TEST(m.max <= 0.05);
    BOOST_TEST(m.min >= -0.05);
    BOOST_TEST(m.max - m.min > 0.09);
  }
  Embedding emb(300, 200, 7);
  auto row = emb.param("weight").to_vector();
  for (int j = 0; j < 200; ++j) BOOST_TEST(row[7 * 200 + j] == 0.0);
  check_normal(make_view(emb.param("weight"), {290, 200}, {200, 1}, 8 * 200), 0.0, 1.0);
  MultiheadAttention mha(64, 4);
  check_uniform(mha.param("in_proj_weight"), std::sqrt(6.0 / (64 + 192)));
  BOOST_TEST(moments(mha.param("in_proj_bias")).max == 0.0);
  BOOST_TEST(moments(mha.child("out_proj")->param("bias")).min == 0.0);
  check_uniform(mha.child("out_proj")->param("weight"), 1.0 / 8.0);
  LayerNorm ln(10);
  BOOST_TEST(moments(ln.param("weight")).min == 1.0);
  BOOST_TEST(moments(ln.param("bias")).max == 0.0);
  BatchNorm2d bn(5);
  BOOST_TEST(moments(bn.buffer("running_var")).min == 1.0);
  BOOST_TEST(bn.buffer("num_batches_tracked").dtype() == DType::Int64);
  BOOST_TEST(bn.buffer("num_batches_tracked").dim() == 0);
  // Transformer: every matrix xavier_uniform_ (bound from its own fans), vectors untouched.
  auto tr = std::make_shared<Transformer>(TransformerOptions{.d_model = 32,
                                                             .nhead = 4,
                                                             .num_encoder_layers = 1,
                                                             .num_decoder_layers = 1,
                                                             .dim_feedforward = 64});
  for (auto& [name, p] : tr->named_parameters()) {
    if (p.dim() < 2) continue;
    BOOST_TEST_CONTEXT(name) {
      double bound = std::sqrt(6.0 / static_cast<double>(p.size(0) + p.size(1)));
      Moments m = moments(p);
      BOOST_TEST(m.max <= bound);
      BOOST_TEST(m.min >= -bound);
      BOOST_TEST(m.max > 0.9 * bound);
    }
  }
}
