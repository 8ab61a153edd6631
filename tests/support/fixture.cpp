#include "tests/support/fixture.h"

#include <cmath>
#include <fstream>

#include "core/error.h"

#ifndef FSDP_FIXTURE_DIR
#error "FSDP_FIXTURE_DIR must be defined by the build"
#endif

namespace fsdp::testing {

std::string fixture_path(const std::string& name) {
  return std::string(FSDP_FIXTURE_DIR) + "/" + name;
}

Fixture::Fixture(const std::string& name) : name_(name) {
  std::ifstream in(fixture_path(name));
  FSDP_CHECK(in.good(), RuntimeError, "fixture {} not found at {}", name, fixture_path(name));
  json_ = nlohmann::json::parse(in);
}

const nlohmann::json& Fixture::value(const std::string& c, const std::string& key) const {
  const auto& cases = json_.at("cases");
  FSDP_CHECK(cases.contains(c), KeyError, "fixture {}: no case '{}'", name_, c);
  FSDP_CHECK(cases.at(c).contains(key), KeyError, "fixture {}: case '{}' has no '{}'", name_, c,
             key);
  return cases.at(c).at(key);
}

bool Fixture::has(const std::string& c, const std::string& key) const {
  const auto& cases = json_.at("cases");
  return cases.contains(c) && cases.at(c).contains(key);
}

Tensor tensor_from_json(const nlohmann::json& j) {
  Shape shape = j.at("shape").get<Shape>();
  DType dt = dtype_from_name(j.at("dtype").get<std::string>());
  const auto& data = j.at("data");
  std::vector<double> values;
  values.reserve(data.size());
  for (const auto& v : data) {
    if (v.is_boolean())
      values.push_back(v.get<bool>() ? 1.0 : 0.0);
    else if (v.is_string())
      values.push_back(std::stod(v.get<std::string>()));  // "nan", "inf"
    else
      values.push_back(v.get<double>());
  }
  if (dt == DType::Int64 || dt == DType::Int32) {
    std::vector<std::int64_t> iv;
    for (const auto& v : data) iv.push_back(v.get<std::int64_t>());
    return from_vector(iv, shape, dt);
  }
  return from_vector(values, shape, dt);
}

Tensor Fixture::tensor(const std::string& c, const std::string& key, bool requires_grad) const {
  Tensor t = tensor_from_json(value(c, key));
  if (requires_grad) t.requires_grad_(true);
  return t;
}

std::string close(const Tensor& actual, const Tensor& expected, double rtol, double atol,
                  const std::string& what) {
  if (!actual.defined() || !expected.defined())
    return what + ": " + (actual.defined() ? "expected" : "actual") + " tensor is undefined";
  if (actual.shape() != expected.shape())
    return fmt::format("{}: shape {} != expected {}", what, shape_str(actual.shape()),
                       shape_str(expected.shape()));
  auto a = actual.to_vector();
  auto e = expected.to_vector();
  double worst = 0;
  std::size_t worst_i = 0;
  bool bad = false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(e[i]) && std::isnan(a[i])) continue;
    double err = std::abs(a[i] - e[i]);
    double tol = atol + rtol * std::abs(e[i]);
    if (!(err <= tol)) {
      if (!bad || err - tol > worst) {
        worst = err - tol;
        worst_i = i;
      }
      bad = true;
    }
  }
  if (!bad) return "";
  return fmt::format("{}: element {} is {:.17g}, expected {:.17g} (shape {}, rtol {}, atol {})",
                     what, worst_i, a[worst_i], e[worst_i], shape_str(actual.shape()), rtol, atol);
}

}  // namespace fsdp::testing
