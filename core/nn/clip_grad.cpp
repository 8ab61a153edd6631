#include "core/nn/clip_grad.h"

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/kernels/kernel_table.h"
#include "core/nn/repr_utils.h"
#include "core/ops.h"

namespace fsdp::nn {

namespace {

void check_grad(const Tensor& g, const char* op) {
  FSDP_CHECK(!common_device(op, {&g}).is_meta(), NotImplementedError,
             "{}: meta gradients have no values (shape {})", op, shape_str(g.shape()));
  FSDP_CHECK(g.is_floating_point(), TypeError, "{}: gradients must be floating point, got {}", op,
             dtype_name(g.dtype()));
}

// One tensor's share of the total, computed on its device (norm_partial's kernel).
double partial_norm(const Tensor& t, double p) {
  Tensor out = new_tensor({}, DType::Float64, t.device());
  kernels(t.device()).norm_partial(out, t, p);
  return out.item();
}

DType result_dtype(const std::vector<Tensor>& tensors) {
  for (const auto& t : tensors)
    if (t.defined() && t.dtype() == DType::Float64) return DType::Float64;
  return DType::Float32;
}

std::vector<Tensor> grads_of(const std::vector<Tensor>& parameters) {
  std::vector<Tensor> grads;
  for (const auto& p : parameters)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

}  // namespace

double norm_partial(const std::vector<Tensor>& tensors, double norm_type) {
  FSDP_CHECK(!std::isnan(norm_type), ValueError, "clip_grad_norm_: norm_type is nan");
  const bool is_max = std::isinf(norm_type) && norm_type > 0;
  const bool is_min = std::isinf(norm_type) && norm_type < 0;
  double total = is_min ? std::numeric_limits<double>::infinity() : 0.0;
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    check_grad(t, "clip_grad_norm_");
    if (t.numel() == 0 || std::isnan(total)) continue;
    const double part = partial_norm(t, norm_type);
    if (std::isnan(part))
      total = part;
    else if (is_max)
      total = std::max(total, part);
    else if (is_min)
      total = std::min(total, part);
    else
      total += part;
  }
  return total;
}

Tensor get_total_norm(const std::vector<Tensor>& tensors, double norm_type,
                      bool error_if_nonfinite) {
  double total = norm_partial(tensors, norm_type);
  bool any = false;
  for (const auto& t : tensors) any = any || (t.defined() && t.numel() > 0);
  if (!any)
    total = 0.0;
  else if (!std::isinf(norm_type) && norm_type != 0.0 && norm_type != 1.0)
    total = std::pow(total, 1.0 / norm_type);
  // On the first gradient's device, as torch's total norm.
  Device device;
  for (const auto& t : tensors)
    if (t.defined()) {
      device = t.device();
      break;
    }
  Tensor out = scalar_tensor(total, TensorOptions(result_dtype(tensors), device));
  if (error_if_nonfinite && !std::isfinite(out.item()))
    throw RuntimeError(fmt::format(
        "The total norm of order {} for gradients from `parameters` is non-finite, so it cannot "
        "be clipped. To disable this error and scale the gradients by the non-finite norm "
        "anyway, set `error_if_nonfinite=False`",
        py_float(norm_type)));
  return out;
}

void clip_grads_with_norm_(const std::vector<Tensor>& parameters, double max_norm,
                           const Tensor& total_norm) {
  const std::vector<Tensor> grads = grads_of(parameters);
  if (grads.empty()) return;
  // In the norm's precision, as torch's tensor arithmetic: max_norm / (total + 1e-6), at most 1.
  double coef;
  if (total_norm.dtype() == DType::Float64) {
    coef = max_norm / (total_norm.item() + 1e-6);
  } else {
    coef = static_cast<float>(max_norm) / (static_cast<float>(total_norm.item()) + 1e-6f);
  }
  if (coef > 1.0) coef = 1.0;  // torch.clamp(max=1.0), which keeps nan
  autograd::NoGradGuard no_grad;
  for (Tensor g : grads) {
    check_grad(g, "clip_grad_norm_");
    mul_(g, coef);
  }
}

Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  const std::vector<Tensor> grads = grads_of(parameters);
  if (grads.empty()) return scalar_tensor(0.0);
  Tensor total = get_total_norm(grads, norm_type, error_if_nonfinite);
  clip_grads_with_norm_(parameters, max_norm, total);
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value) {
  const double lo = -clip_value, hi = clip_value;
  for (const Tensor& g : grads_of(parameters)) {
    check_grad(g, "clip_grad_value_");
    kernels(g.device()).clamp_(g, lo, hi);
    g.storage()->bump_version();
  }
}

}  // namespace fsdp::nn
