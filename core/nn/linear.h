// torch.nn.Identity, Linear and NonDynamicallyQuantizableLinear (MultiheadAttention's out_proj).
#pragma once

#include <cstdint>

#include "core/module.h"
#include "core/nn/cloneable.h"

namespace fsdp::nn {

// Returns its input; ignores constructor arguments, as torch.nn.Identity does.
class Identity : public Module, public Cloneable {
 public:
  FSDP_MODULE_CLASS(Identity, Module)
  Identity() : Module(static_class()) {}
  Value forward(const Args& args) override;
  Tensor forward(const Tensor& x) { return x; }
  ModulePtr clone_structure() const override;
};

// y = x W^T + b. weight [out_features, in_features] ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform
// with a = sqrt(5)), bias [out_features] ~ the same bound; bias=false registers bias as None.
class Linear : public Module, public Cloneable {
 public:
  FSDP_MODULE_CLASS(Linear, Module)
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true,
         TensorOptions options = {});

  Value forward(const Args& args) override;
  Tensor forward(const Tensor& input);
  void reset_parameters() override;
  std::string extra_repr() const override;
  ModulePtr clone_structure() const override;

  const std::int64_t in_features;
  const std::int64_t out_features;

 protected:
  Linear(const ModuleClass& cls, std::int64_t in_features, std::int64_t out_features, bool bias,
         TensorOptions options);
  TensorOptions options_;
};

// Linear under another class name: quantization passes leave it alone (torch uses it for
// MultiheadAttention.out_proj); policies can tell it apart.
class NonDynamicallyQuantizableLinear : public Linear {
 public:
  FSDP_MODULE_CLASS(NonDynamicallyQuantizableLinear, Linear)
  NonDynamicallyQuantizableLinear(std::int64_t in_features, std::int64_t out_features,
                                  bool bias = true, TensorOptions options = {})
      : Linear(static_class(), in_features, out_features, bias, options) {}
  ModulePtr clone_structure() const override;
};

}  // namespace fsdp::nn
