#include "core/nn/activation.h"

#include "core/nn/dropout.h"
#include "core/nn/repr_utils.h"
#include "core/ops.h"

namespace fsdp::nn {

Tensor ReLU::forward(const Tensor& input) {
  return relu(input);
}

GELU::GELU(std::string approx) : Module(static_class()), approximate(std::move(approx)) {
  FSDP_CHECK(approximate == "none" || approximate == "tanh", RuntimeError,
             "approximate argument must be either none or tanh (got '{}')", approximate);
}

Tensor GELU::forward(const Tensor& input) {
  return gelu(input, approximate);
}

DropoutBase::DropoutBase(const ModuleClass& cls, double p_, bool inplace_)
    : Module(cls), p(p_), inplace(inplace_) {
  FSDP_CHECK(p >= 0.0 && p <= 1.0, ValueError,
             "dropout probability has to be between 0 and 1, but got {}", py_float(p));
}

std::string DropoutBase::extra_repr() const {
  return fmt::format("p={}, inplace={}", py_float(p), py_bool(inplace));
}

Tensor Dropout::forward(const Tensor& input) {
  return dropout(input, p, is_training());
}

}  // namespace fsdp::nn
