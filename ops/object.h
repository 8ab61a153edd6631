// Object: what flows through higher-order operators and graphs. A value (tensor, tuple, scalar,
// None), a module (a graph module as a subgraph), a function, or an opaque object (a
// BackwardState, a checkpoint context function).
#pragma once

#include <any>
#include <functional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/module.h"
#include "core/value.h"

namespace fsdp::ops {

// A function of values: the bodies that higher-order operators run.
using Function = std::function<nn::Value(const nn::Args&)>;

class Object {
 public:
  Object() = default;                                // None
  Object(nn::Value v) : v_(std::move(v)) {}          // NOLINT: implicit
  Object(Tensor t) : v_(nn::Value(std::move(t))) {}  // NOLINT
  Object(double d) : v_(nn::Value(d)) {}             // NOLINT
  Object(bool b) : v_(nn::Value(b)) {}               // NOLINT
  Object(nn::ModulePtr m) : v_(std::move(m)) {}      // NOLINT
  Object(Function f) : v_(std::move(f)) {}           // NOLINT
  static Object opaque(std::any a) {
    Object o;
    o.v_ = std::move(a);
    return o;
  }

  bool is_value() const { return v_.index() == 0; }
  bool is_none() const { return is_value() && value().is_none(); }
  bool is_module() const { return v_.index() == 1; }
  bool is_function() const { return v_.index() == 2; }
  bool is_opaque() const { return v_.index() == 3; }

  // Accessors throw TypeError naming what was found.
  const nn::Value& value() const;
  const nn::ModulePtr& module() const;
  const Function& function() const;
  const std::any& opaque() const;
  std::string type_name() const;  // "Tensor", "GraphModule", "function", "opaque", ...

 private:
  std::variant<nn::Value, nn::ModulePtr, Function, std::any> v_;
};

using Kwargs = std::vector<std::pair<std::string, Object>>;  // in call order

// The arguments of a higher-order operator call.
struct HopArgs {
  std::vector<Object> args;
  Kwargs kwargs;
  const Object* kwarg(const std::string& name) const;  // null when absent
  // Every tensor in args and kwargs (tuples flattened), in order.
  std::vector<Tensor> tensors() const;
};

// The tensors inside a value (tuples flattened), in order.
void flatten_tensors(const nn::Value& v, std::vector<Tensor>& out);

}  // namespace fsdp::ops
