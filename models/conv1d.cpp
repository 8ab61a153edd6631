#include "models/conv1d.h"

#include <fmt/format.h>

#include "core/autograd.h"
#include "core/error.h"
#include "core/nn/init.h"
#include "core/ops.h"

namespace fsdp::models {

const nn::ModuleClass& Conv1D::static_class() {
  static const nn::ModuleClass& cls = nn::ModuleClass::from_names("Conv1D", {"Module"});
  return cls;
}

Conv1D::Conv1D(std::int64_t nf_, std::int64_t nx_, TensorOptions options, bool residual_)
    : Module(static_class()), nf(nf_), nx(nx_), residual(residual_) {
  register_parameter("weight", empty({nx, nf}, options.with_requires_grad(false)));
  register_parameter("bias", empty({nf}, options.with_requires_grad(false)));
  reset_parameters();
}

Tensor Conv1D::forward(const Tensor& x) {
  FSDP_CHECK(x.dim() >= 1 && x.size(-1) == nx, ValueError,
             "Conv1D(nf={}, nx={}): input {} does not end in {} features", nf, nx,
             shape_str(x.shape()), nx);
  return add(matmul(x, param("weight")), param("bias"));
}

void Conv1D::reset_parameters() {
  autograd::NoGradGuard no_grad;
  nn::init::normal_(param("weight"), 0.0, 0.02);
  nn::init::zeros_(param("bias"));
}

std::string Conv1D::extra_repr() const {
  return fmt::format("nf={}, nx={}", nf, nx);
}

}  // namespace fsdp::models
