// Formatting helpers that print values the way Python's repr does, so extra_repr() strings
// read exactly like PyTorch's ("eps=1e-05, elementwise_affine=True", "(8,)").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fsdp::nn {

std::string py_bool(bool b);     // "True" / "False"
std::string py_float(double v);  // repr(float): "0.1", "1e-05", "2.0", "inf"
std::string py_optional_float(const std::optional<double>& v);  // "None" when empty
std::string py_tuple(const std::vector<std::int64_t>& v);       // "(8,)", "(2, 3)"

}  // namespace fsdp::nn
