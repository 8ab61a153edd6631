#include "core/dispatch/intercept.h"

#include <fmt/format.h>

namespace fsdp::dispatch::detail {

nn::Value to_value(const TensorOptions& o) {
  return nn::Value(fmt::format("TensorOptions(dtype={}, device={}, requires_grad={})",
                               dtype_name(o.dtype), o.device.str(),
                               o.requires_grad ? "True" : "False"));
}

nn::Value to_value(const std::vector<std::int64_t>& ints) {
  std::vector<nn::Value> out;
  out.reserve(ints.size());
  for (auto i : ints) out.emplace_back(i);
  return nn::Value(std::move(out));
}

nn::Value to_value(const std::vector<Tensor>& tensors) {
  std::vector<nn::Value> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.emplace_back(t);
  return nn::Value(std::move(out));
}

void throw_bad_result(const char* op, const char* expected, const nn::Value& got) {
  throw TypeError(fmt::format("{}: a dispatch mode returned {} where the op returns {}", op,
                              got.type_name(), expected));
}

void throw_input_count(const char* op, std::size_t expected, std::size_t got) {
  throw ValueError(
      fmt::format("{}: expected {} tensor inputs to rerun the op, got {}", op, expected, got));
}

}  // namespace fsdp::dispatch::detail
