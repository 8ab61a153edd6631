// The activations transformers' configs name (activation_function, hidden_act), as modules with
// transformers' class names (ACT2CLS), so module trees and repr match the Python models.
#pragma once

#include <string>
#include <vector>

#include "core/module.h"

namespace fsdp::models {

// The names we support, in transformers' spelling: gelu_new, gelu_pytorch_tanh, gelu, gelu_fast,
// quick_gelu, relu, silu, swish, tanh, linear.
const std::vector<std::string>& supported_activations();
bool is_supported_activation(const std::string& name);
// The function itself; ValueError for a name not in supported_activations().
Tensor activation(const std::string& name, const Tensor& x);

// A parameter-free module applying activation(name, x); its class is transformers' class for
// the name (NewGELUActivation, SiLUActivation, ...).
class Activation : public nn::Module {
 public:
  explicit Activation(std::string name);
  nn::Value forward(const nn::Args& args) override { return forward(args.tensor(0)); }
  Tensor forward(const Tensor& x) const { return activation(name, x); }

  const std::string name;
};

}  // namespace fsdp::models
