// Reference data generated with PyTorch (scripts under tests/, output committed under
// tests/fixtures/), so the test suite itself needs no PyTorch.
//
// File format (JSON): {"generator": "...", "torch_version": "...", "cases": {CASE: {NAME: T |
// number | string | list}}} where a tensor T is {"shape": [2, 3], "dtype": "float64", "data":
// [row-major values]}.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/tensor.h"

namespace fsdp::testing {

// Absolute path of tests/fixtures/NAME (the directory is baked in at build time).
std::string fixture_path(const std::string& name);

class Fixture {
 public:
  explicit Fixture(const std::string& name);  // e.g. "ops.json"
  // The tensor stored at cases[case_name][key]; requires_grad as given.
  Tensor tensor(const std::string& case_name, const std::string& key,
                bool requires_grad = false) const;
  bool has(const std::string& case_name, const std::string& key) const;
  const nlohmann::json& value(const std::string& case_name, const std::string& key) const;
  const nlohmann::json& json() const { return json_; }

 private:
  std::string name_;
  nlohmann::json json_;
};

Tensor tensor_from_json(const nlohmann::json& j);

// Empty string if close (|a - e| <= atol + rtol * |e| elementwise, same shape), else a message
// naming `what`, the shapes, the worst element and its index. Use: BOOST_TEST(close(...) == "").
std::string close(const Tensor& actual, const Tensor& expected, double rtol, double atol,
                  const std::string& what);

}  // namespace fsdp::testing
