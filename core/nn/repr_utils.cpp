#include "core/nn/repr_utils.h"

#include <fmt/format.h>

#include <cmath>

namespace fsdp::nn {

std::string py_bool(bool b) {
  return b ? "True" : "False";
}

std::string py_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // fmt's "{}" is the shortest round-trip form with Python's exponent thresholds; Python
  // additionally keeps a ".0" on integral values.
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string py_optional_float(const std::optional<double>& v) {
  return v ? py_float(*v) : "None";
}

std::string py_tuple(const std::vector<std::int64_t>& v) {
  std::string s = "(";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() == 1) s += ",";
  return s + ")";
}

}  // namespace fsdp::nn
