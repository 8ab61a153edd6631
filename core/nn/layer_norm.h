// torch.nn.LayerNorm: normalises over the trailing `normalized_shape` dimensions.
#pragma once

#include "core/module.h"
#include "core/nn/cloneable.h"

namespace fsdp::nn {

// weight (ones) and bias (zeros) of shape normalized_shape when elementwise_affine; bias=false
// drops the bias (registered as None), as torch >= 2.1.
class LayerNorm : public Module, public Cloneable {
 public:
  FSDP_MODULE_CLASS(LayerNorm, Module)
  LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
            bool bias = true, TensorOptions options = {});
  LayerNorm(std::int64_t normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
            bool bias = true, TensorOptions options = {})
      : LayerNorm(Shape{normalized_shape}, eps, elementwise_affine, bias, options) {}

  Value forward(const Args& args) override { return forward(args.tensor(0)); }
  Tensor forward(const Tensor& input);
  void reset_parameters() override;
  std::string extra_repr() const override;
  ModulePtr clone_structure() const override;

  const Shape normalized_shape;
  const double eps;
  const bool elementwise_affine;

 private:
  bool bias_;
  TensorOptions options_;
};

}  // namespace fsdp::nn
