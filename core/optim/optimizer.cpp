#include "core/optim/optimizer.h"

#include <set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/kernel_utils.h"

namespace fsdp::optim {

void Optimizer::add_group(std::vector<Tensor> params) {
  FSDP_CHECK(!params.empty(), ValueError, "optimizer got an empty parameter list");
  std::set<const TensorImpl*> seen;
  for (const auto& g : groups_)
    for (const auto& p : g.params) seen.insert(p.impl());
  for (const auto& p : params) {
    FSDP_CHECK(p.defined(), TypeError, "optimizer can only optimize defined tensors");
    FSDP_CHECK(p.is_leaf(), ValueError, "can't optimize a non-leaf Tensor");
    FSDP_CHECK(seen.insert(p.impl()).second, ValueError,
               "some parameters appear in more than one parameter group");
  }
  Group g;
  g.state.resize(params.size());
  g.params = std::move(params);
  groups_.push_back(std::move(g));
}

const std::vector<Tensor>& Optimizer::params(std::size_t group) const {
  FSDP_CHECK(group < groups_.size(), IndexError, "parameter group {} out of range ({} groups)",
             group, groups_.size());
  return groups_[group].params;
}

const ParamState& Optimizer::state(std::size_t group, std::size_t index) const {
  FSDP_CHECK(group < groups_.size() && index < groups_[group].state.size(), IndexError,
             "no parameter {} in group {}", index, group);
  return groups_[group].state[index];
}

void Optimizer::set_lr(double lr) {
  for (std::size_t g = 0; g < groups_.size(); ++g) set_lr(lr, g);
}

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& g : groups_)
    for (auto& p : g.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (set_to_none)
        p.set_grad(Tensor());
      else
        grad.zero_();
    }
}

OptimizerStateDict Optimizer::state_dict() const {
  OptimizerStateDict sd;
  std::int64_t index = 0;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    const Group& g = groups_[gi];
    std::vector<std::int64_t> ids;
    for (std::size_t i = 0; i < g.params.size(); ++i, ++index) {
      ids.push_back(index);
      const ParamState& s = g.state[i];
      if (s.tensors.empty() && s.step == 0) continue;  // never stepped: no entry, as torch
      auto& entry = sd.state[index];
      for (const auto& [k, t] : s.tensors) entry[k] = t;
      if (counts_steps()) entry["step"] = scalar_tensor(static_cast<double>(s.step));
    }
    sd.param_groups.push_back(group_options(gi));
    sd.group_params.push_back(std::move(ids));
  }
  return sd;
}

void Optimizer::load_state_dict(const OptimizerStateDict& sd) {
  FSDP_CHECK(sd.param_groups.size() == groups_.size() && sd.group_params.size() == groups_.size(),
             ValueError, "loaded state dict has a different number of parameter groups ({} vs {})",
             sd.param_groups.size(), groups_.size());
  for (std::size_t gi = 0; gi < groups_.size(); ++gi)
    FSDP_CHECK(sd.group_params[gi].size() == groups_[gi].params.size(), ValueError,
               "loaded state dict contains a parameter group that doesn't match the size of "
               "optimizer's group ({} vs {} parameters in group {})",
               sd.group_params[gi].size(), groups_[gi].params.size(), gi);
  autograd::NoGradGuard no_grad;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    set_group_options(gi, sd.param_groups[gi]);
    Group& g = groups_[gi];
    for (std::size_t i = 0; i < g.params.size(); ++i) {
      ParamState fresh;
      auto it = sd.state.find(sd.group_params[gi][i]);
      if (it != sd.state.end()) {
        const Tensor& p = g.params[i];
        for (const auto& [k, t] : it->second) {
          if (k == "step") {
            fresh.step = static_cast<std::int64_t>(t.item());
            continue;
          }
          FSDP_CHECK(t.shape() == p.shape(), ValueError,
                     "optimizer state '{}' of shape {} does not match parameter of shape {}", k,
                     shape_str(t.shape()), shape_str(p.shape()));
          Tensor copy = empty(p.shape(), TensorOptions(p.dtype(), p.device()));
          copy.copy_(t);
          fresh.tensors[k] = copy;
        }
      }
      g.state[i] = std::move(fresh);
    }
  }
}

void check_step_inputs(const char* op, const Tensor& param, const Tensor& grad) {
  FSDP_CHECK(grad.device() == param.device(), RuntimeError,
             "{}: Expected all tensors to be on the same device, but found at least two devices, "
             "{} and {}!",
             op, param.device().str(), grad.device().str());
  check_storage_alive(param, op);
  check_storage_alive(grad, op);
  FSDP_CHECK(grad.shape() == param.shape() && grad.dtype() == param.dtype(), RuntimeError,
             "{}: gradient of shape {} ({}) does not match parameter of shape {} ({})", op,
             shape_str(grad.shape()), dtype_name(grad.dtype()), shape_str(param.shape()),
             dtype_name(param.dtype()));
  FSDP_CHECK(param.is_contiguous(), RuntimeError,
             "{}: parameters must be contiguous (got shape {} with strides {})", op,
             shape_str(param.shape()), shape_str(param.strides()));
  FSDP_CHECK(param.dtype() == DType::Float32 || param.dtype() == DType::Float64, TypeError,
             "{}: not implemented for dtype {} (expected float32 or float64)", op,
             dtype_name(param.dtype()));
}

}  // namespace fsdp::optim

namespace fsdp::optim {

double option_value(const std::map<std::string, double>& m, const char* key) {
  auto it = m.find(key);
  FSDP_CHECK(it != m.end(), KeyError, "optimizer state dict: parameter group has no '{}'", key);
  return it->second;
}

}  // namespace fsdp::optim
