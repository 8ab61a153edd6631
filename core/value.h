// The values modules take and return: a tensor, a tuple of values, None, or a scalar. This is
// the calling convention general enough for modules with several inputs or outputs
// (MultiheadAttention returns (output, weights); Transformer takes src and tgt).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/tensor.h"

namespace fsdp::nn {

class Value {
 public:
  Value() = default;                                  // None
  Value(Tensor t) : v_(std::move(t)) {}               // NOLINT: implicit, so module(x) works
  Value(double d) : v_(d) {}                          // NOLINT
  Value(std::int64_t i) : v_(i) {}                    // NOLINT
  Value(int i) : v_(static_cast<std::int64_t>(i)) {}  // NOLINT
  Value(bool b) : v_(b) {}                            // NOLINT
  Value(std::string s) : v_(std::move(s)) {}          // NOLINT
  Value(const char* s) : v_(std::string(s)) {}        // NOLINT
  Value(std::vector<Value> tuple)
      : v_(std::make_shared<std::vector<Value>>(std::move(tuple))) {}  // NOLINT

  bool is_none() const { return std::holds_alternative<std::monostate>(v_); }
  bool is_tensor() const { return std::holds_alternative<Tensor>(v_); }
  bool is_tuple() const { return std::holds_alternative<std::shared_ptr<std::vector<Value>>>(v_); }
  bool is_double() const { return std::holds_alternative<double>(v_); }
  bool is_int() const { return std::holds_alternative<std::int64_t>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }

  // Accessors throw TypeError naming what was found.
  const Tensor& tensor() const;
  const std::vector<Value>& tuple() const;
  std::vector<Value>& tuple();
  double to_double() const;  // double or int
  std::int64_t to_int() const;
  bool to_bool() const;
  // to_bool(), or `fallback` for None (an optional bool argument).
  bool to_bool_or(bool fallback) const { return is_none() ? fallback : to_bool(); }
  const std::string& str() const;
  std::string type_name() const;  // "Tensor", "tuple", "None", "float", "int", "bool", "str"

  // Element i of a tuple.
  const Value& operator[](std::size_t i) const;

 private:
  std::variant<std::monostate, Tensor, double, std::int64_t, bool, std::string,
               std::shared_ptr<std::vector<Value>>>
      v_;
};

// Positional and keyword arguments of a module call.
struct Args {
  std::vector<Value> positional;
  std::map<std::string, Value> kwargs;

  Args() = default;
  Args(std::initializer_list<Value> pos) : positional(pos) {}
  Args(std::vector<Value> pos, std::map<std::string, Value> kw = {})
      : positional(std::move(pos)), kwargs(std::move(kw)) {}

  std::size_t size() const { return positional.size(); }
  // Positional i, or keyword `name`, or `fallback` (None) when absent.
  const Value& get(std::size_t i, const std::string& name, const Value& fallback = none()) const;
  const Tensor& tensor(std::size_t i) const;  // positional i must be a tensor
  static const Value& none();
};

// Applies fn to every tensor in a (nested) value; returns the rebuilt value.
template <typename Fn>
Value map_tensors(const Value& v, Fn&& fn) {
  if (v.is_tensor()) return Value(fn(v.tensor()));
  if (v.is_tuple()) {
    std::vector<Value> out;
    out.reserve(v.tuple().size());
    for (const auto& e : v.tuple()) out.push_back(map_tensors(e, fn));
    return Value(std::move(out));
  }
  return v;
}

}  // namespace fsdp::nn
