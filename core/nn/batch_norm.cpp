#include "core/nn/batch_norm.h"

#include "core/autograd.h"
#include "core/nn/init.h"
#include "core/nn/repr_utils.h"
#include "core/ops.h"

namespace fsdp::nn {

NormBase::NormBase(const ModuleClass& cls, std::int64_t n, const BatchNormOptions& o)
    : Module(cls),
      num_features(n),
      eps(o.eps),
      momentum(o.momentum),
      affine(o.affine),
      track_running_stats(o.track_running_stats),
      options_(o) {
  options_.tensor = o.tensor.with_requires_grad(false);
  const TensorOptions& t = options_.tensor;
  register_parameter("weight", affine ? empty({n}, t) : Tensor());
  register_parameter("bias", affine ? empty({n}, t) : Tensor());
  if (track_running_stats) {
    register_buffer("running_mean", zeros({n}, t));
    register_buffer("running_var", ones({n}, t));
    register_buffer("num_batches_tracked", zeros({}, TensorOptions(DType::Int64, t.device)));
  } else {
    register_buffer("running_mean", Tensor());
    register_buffer("running_var", Tensor());
    register_buffer("num_batches_tracked", Tensor());
  }
  reset_parameters();
}

void NormBase::reset_running_stats() {
  if (!track_running_stats) return;
  autograd::NoGradGuard no_grad;
  init::zeros_(buffer("running_mean"));
  init::ones_(buffer("running_var"));
  init::zeros_(buffer("num_batches_tracked"));
}

void NormBase::reset_parameters() {
  reset_running_stats();
  if (!affine) return;
  init::ones_(param("weight"));
  init::zeros_(param("bias"));
}

std::string NormBase::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features,
                     py_float(eps), py_optional_float(momentum), py_bool(affine),
                     py_bool(track_running_stats));
}

Tensor BatchNormBase::forward(const Tensor& input) {
  check_input_dim(input);
  // momentum None means a cumulative moving average: factor 1 / batches seen so far.
  double factor = momentum.value_or(0.0);
  const Tensor& tracked = buffer("num_batches_tracked");
  if (is_training() && track_running_stats && tracked.defined()) {
    if (!tracked.is_meta()) {
      autograd::NoGradGuard no_grad;
      Tensor t = tracked;
      t.fill_(t.item() + 1.0);
    }
    if (!momentum) factor = tracked.is_meta() ? 0.0 : 1.0 / tracked.item();
  }
  const Tensor& rm = buffer("running_mean");
  const Tensor& rv = buffer("running_var");
  // Batch statistics when training, or when there are no running statistics to use.
  const bool bn_training = is_training() || (!rm.defined() && !rv.defined());
  // Running statistics are read in eval mode and updated in training when tracked.
  const bool pass_stats = !is_training() || track_running_stats;
  return batch_norm(input, pass_stats ? rm : Tensor(), pass_stats ? rv : Tensor(), param("weight"),
                    param("bias"), bn_training, factor, eps);
}

#define FSDP_BATCH_NORM_CLONE_(NAME)                \
  ModulePtr NAME::clone_structure() const {         \
    BatchNormOptions o = options_;                  \
    o.tensor = o.tensor.with_device(kMeta);         \
    return std::make_shared<NAME>(num_features, o); \
  }
FSDP_BATCH_NORM_CLONE_(BatchNorm1d)
FSDP_BATCH_NORM_CLONE_(BatchNorm2d)
FSDP_BATCH_NORM_CLONE_(BatchNorm3d)
FSDP_BATCH_NORM_CLONE_(SyncBatchNorm)
#undef FSDP_BATCH_NORM_CLONE_

void BatchNorm1d::check_input_dim(const Tensor& input) const {
  FSDP_CHECK(input.dim() == 2 || input.dim() == 3, ValueError,
             "expected 2D or 3D input (got {}D input)", input.dim());
}
void BatchNorm2d::check_input_dim(const Tensor& input) const {
  FSDP_CHECK(input.dim() == 4, ValueError, "expected 4D input (got {}D input)", input.dim());
}
void BatchNorm3d::check_input_dim(const Tensor& input) const {
  FSDP_CHECK(input.dim() == 5, ValueError, "expected 5D input (got {}D input)", input.dim());
}
void SyncBatchNorm::check_input_dim(const Tensor& input) const {
  FSDP_CHECK(input.dim() >= 2, ValueError, "expected at least 2D input (got {}D input)",
             input.dim());
  FSDP_CHECK(input.size(1) != 0, ValueError,
             "SyncBatchNorm number of input channels should be non-zero");
}

}  // namespace fsdp::nn
