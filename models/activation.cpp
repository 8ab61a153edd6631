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
                                             {"linear", "LinearActivation"},
                                             {"gelu_python", "GELUActivation"},
                                             {"gelu_python_tanh", "GELUTanh"},
                                             {"gelu_accurate", "AccurateGELUActivation"},
                                             {"gelu_10", "ClippedGELUActivation"},
                                             {"sigmoid", "Sigmoid"},
                                             {"relu2", "ReLUSquaredActivation"},
                                             {"relu6", "ReLU6"},
                                             {"leaky_relu", "LeakyReLU"},
                                             {"hardswish", "Hardswish"}};
  return entries;
}

const Entry& entry(const std::string& name) {
  for (const auto& e : table())
    if (e.name == name) return e;
  std::string names;
  for (const auto& e : table()) names += (names.empty() ? "" : ", ") + e.name;
  throw ValueError(fmt::format("activation '{}' is not supported (supported: {})", name, names));
}

// x clipped to [low, high] (torch.clip: the bounds' gradient 0).
Tensor clip(const Tensor& x, double low, double high) {
  const TensorOptions options(x.dtype(), x.device());
  return minimum(maximum(x, full(x.shape(), low, options)), full(x.shape(), high, options));
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
  // gelu_new (GPT-2's), gelu_pytorch_tanh, gelu_fast, gelu_python_tanh and gelu_accurate are one
  // function, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), written with other groupings:
  // core's fused tanh GELU (one pass forward and backward; term by term it was ~20 passes over the
  // MLP's activations) is within a few float32 ulps of each, as transformers' own two forms differ
  // (hf-models.md: 2.4e-7).
  if (n == "gelu_new" || n == "gelu_pytorch_tanh" || n == "gelu_fast") return gelu(x, "tanh");
  if (n == "gelu") return gelu(x, "none");
  if (n == "quick_gelu") return mul(x, sigmoid(mul(x, 1.702)));
  if (n == "relu") return relu(x);
  if (n == "silu" || n == "swish") return silu(x);
  if (n == "tanh") return tanh(x);
  if (n == "gelu_python") return gelu(x, "none");  // the same erf formula, written out
  if (n == "gelu_python_tanh" || n == "gelu_accurate") return gelu(x, "tanh");
  if (n == "gelu_10") return clip(gelu(x, "none"), -10, 10);
  if (n == "sigmoid") return sigmoid(x);
  if (n == "relu2") return mul(relu(x), relu(x));
  if (n == "relu6") return clip(x, 0, 6);
  if (n == "leaky_relu") return where(gt(x, zeros_like(x)), x, mul(x, 0.01));  // nn.LeakyReLU()
  if (n == "hardswish") return div(mul(x, clip(add(x, 3.0), 0, 6)), 6.0);      // torch's order
  return x;                                                                    // linear
}

Activation::Activation(std::string name_)
    : Module(nn::ModuleClass::from_names(entry(name_).cls, {"Module"})), name(std::move(name_)) {}

}  // namespace fsdp::models
