#include "core/nn/linear.h"

#include <cmath>

#include "core/nn/init.h"
#include "core/nn/repr_utils.h"
#include "core/ops.h"

namespace fsdp::nn {

Value Identity::forward(const Args& args) {
  FSDP_CHECK(args.size() >= 1, TypeError, "Identity.forward() missing required argument 'input'");
  return args.positional[0];
}

ModulePtr Identity::clone_structure() const {
  return std::make_shared<Identity>();
}

Linear::Linear(std::int64_t in, std::int64_t out, bool bias, TensorOptions options)
    : Linear(static_class(), in, out, bias, options) {}

Linear::Linear(const ModuleClass& cls, std::int64_t in, std::int64_t out, bool bias,
               TensorOptions options)
    : Module(cls), in_features(in), out_features(out), options_(options.with_requires_grad(false)) {
  FSDP_CHECK(in >= 0 && out >= 0, ValueError,
             "{}: in_features and out_features must be non-negative (got {} and {})", type_name(),
             in, out);
  register_parameter("weight", empty({out, in}, options_));
  register_parameter("bias", bias ? empty({out}, options_) : Tensor());
  reset_parameters();
}

void Linear::reset_parameters() {
  // kaiming_uniform_(a=sqrt(5)) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  const Tensor& w = param("weight");
  init::kaiming_uniform_(w, std::sqrt(5.0));
  const Tensor& b = param("bias");
  if (b.defined()) {
    double bound = in_features > 0 ? 1.0 / std::sqrt(static_cast<double>(in_features)) : 0.0;
    init::uniform_(b, -bound, bound);
  }
}

Value Linear::forward(const Args& args) {
  return forward(args.tensor(0));
}

Tensor Linear::forward(const Tensor& input) {
  return linear(input, param("weight"), param("bias"));
}

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_features, out_features,
                     py_bool(param("bias").defined()));
}

ModulePtr Linear::clone_structure() const {
  return std::make_shared<Linear>(in_features, out_features, param("bias").defined(),
                                  options_.with_device(kMeta));
}

ModulePtr NonDynamicallyQuantizableLinear::clone_structure() const {
  return std::make_shared<NonDynamicallyQuantizableLinear>(
      in_features, out_features, param("bias").defined(), options_.with_device(kMeta));
}

}  // namespace fsdp::nn
