#include "core/value.h"

#include "core/error.h"

namespace fsdp::nn {

std::string Value::type_name() const {
  if (is_none()) return "None";
  if (is_tensor()) return "Tensor";
  if (is_tuple()) return "tuple";
  if (is_double()) return "float";
  if (is_int()) return "int";
  if (is_bool()) return "bool";
  return "str";
}

const Tensor& Value::tensor() const {
  FSDP_CHECK(is_tensor(), TypeError, "expected a Tensor but got {}", type_name());
  return std::get<Tensor>(v_);
}
const std::vector<Value>& Value::tuple() const {
  FSDP_CHECK(is_tuple(), TypeError, "expected a tuple but got {}", type_name());
  return *std::get<std::shared_ptr<std::vector<Value>>>(v_);
}
std::vector<Value>& Value::tuple() {
  FSDP_CHECK(is_tuple(), TypeError, "expected a tuple but got {}", type_name());
  return *std::get<std::shared_ptr<std::vector<Value>>>(v_);
}
double Value::to_double() const {
  if (is_int()) return static_cast<double>(std::get<std::int64_t>(v_));
  FSDP_CHECK(is_double(), TypeError, "expected a float but got {}", type_name());
  return std::get<double>(v_);
}
std::int64_t Value::to_int() const {
  FSDP_CHECK(is_int(), TypeError, "expected an int but got {}", type_name());
  return std::get<std::int64_t>(v_);
}
bool Value::to_bool() const {
  FSDP_CHECK(is_bool(), TypeError, "expected a bool but got {}", type_name());
  return std::get<bool>(v_);
}
const std::string& Value::str() const {
  FSDP_CHECK(is_string(), TypeError, "expected a str but got {}", type_name());
  return std::get<std::string>(v_);
}
const Value& Value::operator[](std::size_t i) const {
  const auto& t = tuple();
  FSDP_CHECK(i < t.size(), IndexError, "tuple index {} out of range (size {})", i, t.size());
  return t[i];
}

const Value& Args::none() {
  static const Value v;
  return v;
}

const Value& Args::get(std::size_t i, const std::string& name, const Value& fallback) const {
  if (i < positional.size()) {
    FSDP_CHECK(!kwargs.count(name), TypeError, "got multiple values for argument '{}'", name);
    return positional[i];
  }
  auto it = kwargs.find(name);
  return it == kwargs.end() ? fallback : it->second;
}

const Tensor& Args::tensor(std::size_t i) const {
  FSDP_CHECK(i < positional.size(), TypeError,
             "missing positional argument {} (got {} positional arguments)", i, positional.size());
  FSDP_CHECK(positional[i].is_tensor(), TypeError, "argument {} must be a Tensor, not {}", i,
             positional[i].type_name());
  return positional[i].tensor();
}

}  // namespace fsdp::nn
