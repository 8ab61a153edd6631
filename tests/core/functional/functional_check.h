// Shared checks for the core/functional tests: fixture comparison of forward and backward in
// float32 and float64, and finite-difference gradient checks in float64.
#pragma once

#include <boost/test/unit_test.hpp>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "tests/support/fixture.h"

namespace fsdp::testing {

using Inputs = std::map<std::string, Tensor>;
using OpFn = std::function<Tensor(const Inputs&)>;

inline const char* dtype_suffix(DType d) {
  return d == DType::Float32 ? "f32" : "f64";
}
inline double rtol_for(DType d) {
  return d == DType::Float32 ? 1e-5 : 1e-10;
}
inline double atol_for(DType d) {
  return d == DType::Float32 ? 1e-6 : 1e-12;
}

// A copy of `t` in dtype d (a fresh leaf).
inline Tensor converted(const Tensor& t, DType d) {
  Tensor out = empty(t.shape(), TensorOptions(d));
  out.copy_(t);
  return out;
}

// Loads `names` from the case (floating ones converted to `d`, those in `diff` requiring grad),
// runs fn, backpropagates the fixture's `gy` and compares out_* and g<name>_* with the fixture.
// Returns the inputs after the call (running stats are updated in place by batch_norm).
inline Inputs check_case(const Fixture& fx, const std::string& c, DType d,
                         const std::vector<std::string>& names,
                         const std::vector<std::string>& diff, const OpFn& fn) {
  BOOST_TEST_CONTEXT("case " << c << " in " << dtype_name(d)) {
    Inputs in;
    for (const auto& n : names) {
      Tensor t = fx.tensor(c, n);
      if (t.is_floating_point()) t = converted(t, d);
      for (const auto& g : diff)
        if (g == n) t.requires_grad_(true);
      in[n] = t;
    }
    Tensor out = fn(in);
    const std::string sfx = dtype_suffix(d);
    BOOST_TEST(out.dtype() == d);
    BOOST_TEST(close(out, fx.tensor(c, "out_" + sfx), rtol_for(d), atol_for(d), c + " out") == "");
    if (!diff.empty()) {
      out.backward(converted(fx.tensor(c, "gy"), d));
      for (const auto& g : diff) {
        Tensor grad = in[g].grad();
        BOOST_TEST_REQUIRE(grad.defined(), c << ": no gradient for " << g);
        BOOST_TEST(grad.dtype() == d);
        BOOST_TEST(close(grad, fx.tensor(c, "g" + g + "_" + sfx), rtol_for(d), atol_for(d),
                         c + " grad " + g) == "");
      }
    }
    return in;
  }
  return {};
}

inline void check_case_both(const Fixture& fx, const std::string& c,
                            const std::vector<std::string>& names,
                            const std::vector<std::string>& diff, const OpFn& fn) {
  check_case(fx, c, DType::Float64, names, diff, fn);
  check_case(fx, c, DType::Float32, names, diff, fn);
}

// Central finite differences of L = sum(fn(inputs) * w) in float64 against autograd, for every
// element of every input named in `diff`. Inputs must be contiguous float64 leaves.
inline void gradcheck(const std::string& what, Inputs in, const std::vector<std::string>& diff,
                      const OpFn& fn, double h = 1e-6, double tol = 1e-6) {
  BOOST_TEST_CONTEXT("gradcheck " << what) {
    for (const auto& g : diff) {
      in[g].requires_grad_(true);
      in[g].set_grad(Tensor());  // inputs may be shared between checks
    }
    Tensor out = fn(in);
    // A fixed, non-uniform weighting so every output element matters differently.
    std::vector<double> wv(static_cast<std::size_t>(out.numel()));
    for (std::size_t i = 0; i < wv.size(); ++i) wv[i] = 0.3 + 0.7 * std::sin(1.0 + 1.3 * double(i));
    Tensor w = from_vector(wv, out.shape(), TensorOptions(DType::Float64));
    out.backward(w);
    auto loss = [&]() {
      autograd::NoGradGuard ng;
      auto v = fn(in).to_vector();
      double s = 0;
      for (std::size_t i = 0; i < v.size(); ++i) s += v[i] * wv[i];
      return s;
    };
    for (const auto& g : diff) {
      Tensor t = in[g];
      BOOST_TEST_REQUIRE(t.grad().defined(), what << ": no gradient for " << g);
      auto analytic = t.grad().to_vector();
      double* p = t.data<double>();
      for (std::int64_t i = 0; i < t.numel(); ++i) {
        const double orig = p[i];
        p[i] = orig + h;
        const double lp = loss();
        p[i] = orig - h;
        const double lm = loss();
        p[i] = orig;
        const double numeric = (lp - lm) / (2 * h);
        const double a = analytic[static_cast<std::size_t>(i)];
        BOOST_TEST(
            std::abs(a - numeric) <= tol * (1 + std::abs(numeric)),
            what << ": d/d" << g << "[" << i << "] analytic " << a << " vs numeric " << numeric);
      }
    }
  }
}

// A float64 tensor of `shape` with deterministic, well-spread values.
inline Tensor det_values(const Shape& shape, double scale = 1.0, double phase = 0.0) {
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = scale * std::sin(0.7 * double(i) + phase) + 0.05 * double(i % 5);
  return from_vector(v, shape, TensorOptions(DType::Float64));
}

// Runs fn and checks it throws E with a message containing every one of `needles`.
template <typename E, typename F>
void check_throws(F&& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    BOOST_ERROR("expected an exception containing " << needles.front());
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const auto& n : needles)
      BOOST_TEST(msg.find(n) != std::string::npos, "message '" << msg << "' lacks '" << n << "'");
  }
}

}  // namespace fsdp::testing
