#include "core/nn/layer_norm.h"

#include "core/nn/init.h"
#include "core/nn/repr_utils.h"
#include "core/ops.h"

namespace fsdp::nn {

LayerNorm::LayerNorm(Shape shape, double eps_, bool affine, bool bias, TensorOptions options)
    : Module(static_class()),
      normalized_shape(std::move(shape)),
      eps(eps_),
      elementwise_affine(affine),
      bias_(bias),
      options_(options.with_requires_grad(false)) {
  for (auto d : normalized_shape)
    FSDP_CHECK(d >= 0, ValueError, "LayerNorm: normalized_shape must be non-negative, got {}",
               py_tuple(normalized_shape));
  register_parameter("weight", affine ? empty(normalized_shape, options_) : Tensor());
  register_parameter("bias", affine && bias ? empty(normalized_shape, options_) : Tensor());
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (param("weight").defined()) init::ones_(param("weight"));
  if (param("bias").defined()) init::zeros_(param("bias"));
}

Tensor LayerNorm::forward(const Tensor& input) {
  return layer_norm(input, normalized_shape, param("weight"), param("bias"), eps);
}

std::string LayerNorm::extra_repr() const {
  return fmt::format("{}, eps={}, elementwise_affine={}", py_tuple(normalized_shape), py_float(eps),
                     py_bool(elementwise_affine));
}

ModulePtr LayerNorm::clone_structure() const {
  return std::make_shared<LayerNorm>(normalized_shape, eps, elementwise_affine, bias_,
                                     options_.with_device(kMeta));
}

}  // namespace fsdp::nn
