#include "ops/object.h"

#include <fmt/format.h>

#include "core/error.h"

namespace fsdp::ops {

namespace {
[[noreturn]] void wrong(const char* expected, const Object& o) {
  throw TypeError(fmt::format("expected {}, got {}", expected, o.type_name()));
}
}  // namespace

const nn::Value& Object::value() const {
  if (!is_value()) wrong("a value", *this);
  return std::get<0>(v_);
}
const nn::ModulePtr& Object::module() const {
  if (!is_module()) wrong("a module", *this);
  return std::get<1>(v_);
}
const Function& Object::function() const {
  if (!is_function()) wrong("a function", *this);
  return std::get<2>(v_);
}
const std::any& Object::opaque() const {
  if (!is_opaque()) wrong("an opaque object", *this);
  return std::get<3>(v_);
}

std::string Object::type_name() const {
  switch (v_.index()) {
    case 0:
      return std::get<0>(v_).type_name();
    case 1:
      return std::get<1>(v_) ? std::get<1>(v_)->type_name() : "None";
    case 2:
      return "function";
    default:
      return "opaque";
  }
}

const Object* HopArgs::kwarg(const std::string& name) const {
  for (const auto& [k, v] : kwargs)
    if (k == name) return &v;
  return nullptr;
}

void flatten_tensors(const nn::Value& v, std::vector<Tensor>& out) {
  if (v.is_tensor()) {
    out.push_back(v.tensor());
  } else if (v.is_tuple()) {
    for (const auto& e : v.tuple()) flatten_tensors(e, out);
  }
}

std::vector<Tensor> HopArgs::tensors() const {
  std::vector<Tensor> out;
  for (const auto& a : args)
    if (a.is_value()) flatten_tensors(a.value(), out);
  for (const auto& [k, a] : kwargs)
    if (a.is_value()) flatten_tensors(a.value(), out);
  return out;
}

}  // namespace fsdp::ops
