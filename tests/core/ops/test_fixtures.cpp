// Forward and backward of every op in op_table.h against PyTorch (float32 and float64), and
// finite-difference checks of every gradient in float64.
#include <fmt/format.h>

#include <boost/test/unit_test.hpp>

#include "core/autograd.h"
#include "tests/core/ops/op_table.h"
#include "tests/support/fixture.h"

namespace fsdp::testing {
namespace {

const Fixture& fixture() {
  static const Fixture f("ops_cases.json");
  return f;
}

struct Loaded {
  std::vector<Tensor> inputs, gouts;
  std::vector<std::size_t> grad_inputs;
};

Loaded load_case(const std::string& key, bool requires_grad) {
  const Fixture& f = fixture();
  Loaded l;
  for (auto i : f.value(key, "grad_inputs")) l.grad_inputs.push_back(i.get<std::size_t>());
  for (std::size_t i = 0; f.has(key, fmt::format("x{}", i)); ++i) {
    Tensor t = f.tensor(key, fmt::format("x{}", i));
    if (requires_grad && t.is_floating_point()) t.requires_grad_(true);
    l.inputs.push_back(t);
  }
  for (std::size_t i = 0; f.has(key, fmt::format("gout{}", i)); ++i)
    l.gouts.push_back(f.tensor(key, fmt::format("gout{}", i)));
  return l;
}

// sum_i <out_i, gout_i> in double.
double loss(const std::vector<Tensor>& outs, const std::vector<Tensor>& gouts) {
  double s = 0;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    auto o = outs[i].to_vector(), g = gouts[i].to_vector();
    for (std::size_t k = 0; k < o.size(); ++k) s += o[k] * g[k];
  }
  return s;
}

BOOST_AUTO_TEST_SUITE(ops_fixtures)

BOOST_AUTO_TEST_CASE(every_case_has_an_op) {
  std::size_t n = 0;
  for (const auto& [key, value] : fixture().json().at("cases").items()) {
    std::string name = key.substr(0, key.find('/'));
    BOOST_TEST_CONTEXT(key) {
      BOOST_TEST(op_table().count(name) == 1u);
    }
    ++n;
  }
  BOOST_TEST(n == 2 * op_table().size());
}

BOOST_AUTO_TEST_CASE(forward_and_backward_match_pytorch) {
  const Fixture& f = fixture();
  for (const auto& [key, value] : f.json().at("cases").items()) {
    BOOST_TEST_CONTEXT(key) {
      const bool f64 = key.ends_with("float64");
      const double rtol = f64 ? 1e-10 : 1e-5, atol = f64 ? 1e-12 : 1e-6;
      Loaded l = load_case(key, true);
      const auto& op = op_table().at(key.substr(0, key.find('/')));
      std::vector<Tensor> outs = op(l.inputs);
      BOOST_TEST_REQUIRE(outs.size() == l.gouts.size());
      for (std::size_t i = 0; i < outs.size(); ++i) {
        std::string k = fmt::format("out{}", i);
        BOOST_TEST(close(outs[i], f.tensor(key, k), rtol, atol, k) == "");
        BOOST_TEST(dtype_name(outs[i].dtype()) == dtype_name(f.tensor(key, k).dtype()));
      }
      autograd::backward(outs, l.gouts);
      for (auto i : l.grad_inputs) {
        std::string k = fmt::format("g{}", i);
        BOOST_TEST(close(l.inputs[i].grad(), f.tensor(key, k), rtol, atol, k) == "");
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(gradients_match_finite_differences) {
  const Fixture& f = fixture();
  const double eps = 1e-6;
  for (const auto& [key, value] : f.json().at("cases").items()) {
    if (!key.ends_with("float64")) continue;
    BOOST_TEST_CONTEXT(key) {
      const auto& op = op_table().at(key.substr(0, key.find('/')));
      Loaded l = load_case(key, true);
      autograd::backward(op(l.inputs), l.gouts);
      autograd::NoGradGuard ng;
      for (auto i : l.grad_inputs) {
        auto analytic = l.inputs[i].grad().to_vector();
        std::vector<double> numeric;
        for (std::int64_t k = 0; k < l.inputs[i].numel(); ++k) {
          std::vector<Tensor> in = l.inputs;
          in[i] = l.inputs[i].detach().clone();
          double* p = in[i].data<double>();
          const double x0 = p[k];
          p[k] = x0 + eps;
          double up = loss(op(in), l.gouts);
          p[k] = x0 - eps;
          double down = loss(op(in), l.gouts);
          numeric.push_back((up - down) / (2 * eps));
        }
        Tensor num = from_vector(numeric, l.inputs[i].shape(), DType::Float64);
        Tensor ana = from_vector(analytic, l.inputs[i].shape(), DType::Float64);
        BOOST_TEST(close(ana, num, 1e-6, 1e-6, fmt::format("grad of x{}", i)) == "");
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace fsdp::testing
