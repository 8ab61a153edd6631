#include "models/activation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "core/ops.h"

namespace fsdp::models {

namespace {

struct Entry {
  std::string name, cls;
};

// transformers 5.24's ACT2CLS, for the names we support.
const std::vector<Entry>& table() {
  static const std::vector<Entry> entries = {{"gelu_new", "NewGELUActivation"},
                                             {"gelu_pytorch_tanh", "GELUTanh"},
                                             {"gelu", "GELUActivation"},
                                             {"gelu_fast", "FastGELUActivation"},
                                             {"quick_gelu", "QuickGELUActivation"},
                                             {"relu", "ReLU"},
                                             {"silu", "SiLUActivation"},
                                             {"swish", "SiLU"},
                                             {"tanh", "Tanh"},
                                             {"linear", "LinearActivation"}};
  return entries;
}

const Entry& entry(const std::string& name) {
  for (const auto& e : table())
    if (e.name == name) return e;
  std::string names;
  for (const auto& e : table()) names += (names.empty() ? "" : ", ") + e.name;
  throw ValueError(fmt::format("activation '{}' is not supported (supported: {})", name, names));
}

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), term for term as transformers' NewGELU.
Tensor gelu_new(const Tensor& x) {
  const Tensor inner = mul(add(x, mul(pow(x, 3.0), 0.044715)), std::sqrt(2.0 / M_PI));
  return mul(mul(x, 0.5), add(tanh(inner), 1.0));
}

}  // namespace

const std::vector<std::string>& supported_activations() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& e : table()) out.push_back(e.name);
    return out;
  }();
  return names;
}

bool is_supported_activation(const std::string& name) {
  const auto& names = supported_activations();
  return std::find(names.begin(), names.end(), name) != names.end();
}

Tensor activation(const std::string& name, const Tensor& x) {
  const std::string& n = entry(name).name;
  if (n == "gelu_new") return gelu_new(x);
  if (n == "gelu_pytorch_tanh") return gelu(x, "tanh");
  if (n == "gelu") return gelu(x, "none");
  if (n == "gelu_fast")  // 0.5 x (1 + tanh(0.7978845608 x (1 + 0.044715 x^2)))
    return mul(mul(x, 0.5),
               add(tanh(mul(mul(x, 0.7978845608), add(mul(mul(x, x), 0.044715), 1.0))), 1.0));
  if (n == "quick_gelu") return mul(x, sigmoid(mul(x, 1.702)));
  if (n == "relu") return relu(x);
  if (n == "silu" || n == "swish") return silu(x);
  if (n == "tanh") return tanh(x);
  return x;  // linear
}

Activation::Activation(std::string name_)
    : Module(nn::ModuleClass::from_names(entry(name_).cls, {"Module"})), name(std::move(name_)) {}

}  // namespace fsdp::models
