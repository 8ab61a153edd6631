// The flat update kernels (core/optim/update_kernels.h) against a plain double-precision
// reference of torch's formulas, for lengths around the vector width (0, 1, 7, 8, 9, 37) and
// every combination of flags, over three steps.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <vector>

#include "core/optim/update_kernels.h"

using namespace fsdp::optim;

namespace {

struct Buffers {
  std::vector<double> p, g, m, v, vmax;
};

Buffers make_buffers(std::size_t n) {
  Buffers b;
  for (std::size_t i = 0; i < n; ++i) {
    b.p.push_back(std::sin(0.7 * static_cast<double>(i) + 0.3));
    b.g.push_back(std::cos(1.3 * static_cast<double>(i)) * 0.5);
  }
  b.m.assign(n, 0.0);
  b.v.assign(n, 0.0);
  b.vmax.assign(n, 0.0);
  return b;
}

void adam_reference(Buffers& b, const AdamScalars& s, bool amsgrad) {
  const double bc1 = 1.0 - std::pow(s.beta1, static_cast<double>(s.step));
  const double bc2 = 1.0 - std::pow(s.beta2, static_cast<double>(s.step));
  for (std::size_t i = 0; i < b.p.size(); ++i) {
    double g = s.maximize ? -b.g[i] : b.g[i];
    if (s.decoupled) b.p[i] *= 1.0 - s.lr * s.weight_decay;
    if (!s.decoupled) g += s.weight_decay * b.p[i];
    b.m[i] = s.beta1 * b.m[i] + (1.0 - s.beta1) * g;
    b.v[i] = s.beta2 * b.v[i] + (1.0 - s.beta2) * g * g;
    b.vmax[i] = std::max(b.vmax[i], b.v[i]);
    const double second = amsgrad ? b.vmax[i] : b.v[i];
    b.p[i] -= s.lr / bc1 * b.m[i] / (std::sqrt(second) / std::sqrt(bc2) + s.eps);
  }
}

template <typename T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <typename T>
void check_close(const std::vector<T>& got, const std::vector<double>& want, double tol,
                 const std::string& what) {
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST_CONTEXT(what << " element " << i) {
      BOOST_TEST(std::abs(static_cast<double>(got[i]) - want[i]) <= tol * (1 + std::abs(want[i])));
    }
}

template <typename T>
void adam_case(std::size_t n, bool decoupled, bool amsgrad, bool maximize, double tol) {
  Buffers ref = make_buffers(n);
  auto p = as<T>(ref.p), g = as<T>(ref.g), m = as<T>(ref.m), v = as<T>(ref.v), vm = as<T>(ref.m);
  AdamScalars s{0.01, 0.9, 0.99, 1e-8, 0.1, decoupled, maximize, 1};
  for (s.step = 1; s.step <= 3; ++s.step) {
    adam_update_flat<T>(p.data(), g.data(), m.data(), v.data(), amsgrad ? vm.data() : nullptr,
                        static_cast<std::int64_t>(n), s);
    adam_reference(ref, s, amsgrad);
  }
  const std::string what = "n=" + std::to_string(n) + " decoupled=" + std::to_string(decoupled) +
                           " amsgrad=" + std::to_string(amsgrad) +
                           " maximize=" + std::to_string(maximize);
  check_close(p, ref.p, tol, what + " param");
  check_close(m, ref.m, tol, what + " exp_avg");
  check_close(v, ref.v, tol, what + " exp_avg_sq");
}

template <typename T>
void sgd_case(std::size_t n, double momentum, bool nesterov, bool maximize, double tol) {
  Buffers ref = make_buffers(n);
  auto p = as<T>(ref.p), g = as<T>(ref.g), buf = as<T>(ref.m);
  SgdScalars s{0.1, momentum, 0.25, 0.05, nesterov, maximize, true};
  for (int step = 0; step < 3; ++step, s.first_step = false) {
    sgd_update_flat<T>(p.data(), g.data(), momentum != 0.0 ? buf.data() : nullptr,
                       static_cast<std::int64_t>(n), s);
    for (std::size_t i = 0; i < n; ++i) {
      double d = (maximize ? -ref.g[i] : ref.g[i]) + s.weight_decay * ref.p[i];
      if (momentum != 0.0) {
        ref.m[i] = s.first_step ? d : momentum * ref.m[i] + (1 - s.dampening) * d;
        d = nesterov ? d + momentum * ref.m[i] : ref.m[i];
      }
      ref.p[i] -= s.lr * d;
    }
  }
  check_close(p, ref.p, tol, "sgd n=" + std::to_string(n) + " param");
  if (momentum != 0.0) check_close(buf, ref.m, tol, "sgd n=" + std::to_string(n) + " buffer");
}

const std::size_t kLengths[] = {0, 1, 7, 8, 9, 37};

}  // namespace

BOOST_AUTO_TEST_SUITE(update_kernels)

BOOST_AUTO_TEST_CASE(adam_matches_reference_for_every_flag_and_length) {
  for (std::size_t n : kLengths)
    for (bool decoupled : {false, true})
      for (bool amsgrad : {false, true})
        for (bool maximize : {false, true}) {
          adam_case<float>(n, decoupled, amsgrad, maximize, 2e-6);
          adam_case<double>(n, decoupled, amsgrad, maximize, 1e-12);
        }
}

BOOST_AUTO_TEST_CASE(adam_leaves_elements_past_n_alone) {
  std::vector<float> p(16, 1.f), g(16, 1.f), m(16, 0.f), v(16, 0.f);
  adam_update_flat<float>(p.data(), g.data(), m.data(), v.data(), nullptr, 9, AdamScalars{});
  BOOST_TEST(p[8] != 1.f);
  for (std::size_t i = 9; i < 16; ++i) BOOST_TEST(p[i] == 1.f);
}

BOOST_AUTO_TEST_CASE(sgd_matches_reference_for_every_flag_and_length) {
  for (std::size_t n : kLengths)
    for (double momentum : {0.0, 0.9})
      for (bool nesterov : {false, true})
        for (bool maximize : {false, true}) {
          sgd_case<float>(n, momentum, nesterov && momentum != 0.0, maximize, 2e-6);
          sgd_case<double>(n, momentum, nesterov && momentum != 0.0, maximize, 1e-12);
        }
}

BOOST_AUTO_TEST_SUITE_END()
