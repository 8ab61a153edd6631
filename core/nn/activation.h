// torch.nn.ReLU and GELU: parameter-free activation modules.
#pragma once

#include <string>

#include "core/module.h"
#include "core/nn/cloneable.h"

namespace fsdp::nn {

class ReLU : public Module, public Cloneable {
 public:
  FSDP_MODULE_CLASS(ReLU, Module)
  // inplace is accepted for compatibility; the result is computed out of place (same values).
  explicit ReLU(bool inplace = false) : Module(static_class()), inplace(inplace) {}
  Value forward(const Args& args) override { return forward(args.tensor(0)); }
  Tensor forward(const Tensor& input);
  std::string extra_repr() const override { return inplace ? "inplace=True" : ""; }
  ModulePtr clone_structure() const override { return std::make_shared<ReLU>(inplace); }

  const bool inplace;
};

class GELU : public Module, public Cloneable {
 public:
  FSDP_MODULE_CLASS(GELU, Module)
  // approximate: "none" (erf) or "tanh".
  explicit GELU(std::string approximate = "none");
  Value forward(const Args& args) override { return forward(args.tensor(0)); }
  Tensor forward(const Tensor& input);
  std::string extra_repr() const override { return "approximate='" + approximate + "'"; }
  ModulePtr clone_structure() const override { return std::make_shared<GELU>(approximate); }

  const std::string approximate;
};

}  // namespace fsdp::nn
