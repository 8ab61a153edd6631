#include "core/optim/adam.h"

#include <cmath>

#include "core/autograd.h"
#include "core/error.h"
#include "core/kernels/kernel_table.h"
#include "core/optim/update_kernels.h"

namespace fsdp::optim {

void AdamOptions::validate() const {
  FSDP_CHECK(lr >= 0.0, ValueError, "Invalid learning rate: {}", lr);
  FSDP_CHECK(eps >= 0.0, ValueError, "Invalid epsilon value: {}", eps);
  FSDP_CHECK(betas.first >= 0.0 && betas.first < 1.0, ValueError,
             "Invalid beta parameter at index 0: {}", betas.first);
  FSDP_CHECK(betas.second >= 0.0 && betas.second < 1.0, ValueError,
             "Invalid beta parameter at index 1: {}", betas.second);
  FSDP_CHECK(weight_decay >= 0.0, ValueError, "Invalid weight_decay value: {}", weight_decay);
}

std::map<std::string, double> AdamOptions::to_map() const {
  return {{"lr", lr},
          {"beta1", betas.first},
          {"beta2", betas.second},
          {"eps", eps},
          {"weight_decay", weight_decay},
          {"amsgrad", amsgrad ? 1.0 : 0.0},
          {"maximize", maximize ? 1.0 : 0.0}};
}

AdamOptions AdamOptions::from_map(const std::map<std::string, double>& m) {
  AdamOptions o;
  o.lr = option_value(m, "lr");
  o.betas = {option_value(m, "beta1"), option_value(m, "beta2")};
  o.eps = option_value(m, "eps");
  o.weight_decay = option_value(m, "weight_decay");
  o.amsgrad = option_value(m, "amsgrad") != 0.0;
  o.maximize = option_value(m, "maximize") != 0.0;
  o.validate();
  return o;
}

namespace {
Tensor& state_tensor(ParamState& s, const char* name, const Tensor& like) {
  auto it = s.tensors.find(name);
  if (it == s.tensors.end()) it = s.tensors.emplace(name, zeros_like(like)).first;
  return it->second;
}

template <typename Group>
void adam_step(Group& g, const AdamOptions& o, bool decoupled, const char* op) {
  for (std::size_t i = 0; i < g.params.size(); ++i) {
    const Tensor& p = g.params[i];
    Tensor grad = p.grad();
    if (!grad.defined() || p.is_meta()) continue;
    check_step_inputs(op, p, grad);
    grad = grad.contiguous();
    ParamState& s = g.state[i];
    Tensor& m = state_tensor(s, "exp_avg", p);
    Tensor& v = state_tensor(s, "exp_avg_sq", p);
    Tensor vmax = o.amsgrad ? state_tensor(s, "max_exp_avg_sq", p) : Tensor();
    ++s.step;
    const AdamScalars k{o.lr,           o.betas.first, o.betas.second, o.eps,
                        o.weight_decay, decoupled,     o.maximize,     s.step};
    kernels(p.device()).adam_update(p, grad, m, v, vmax, k);
    p.storage()->bump_version();
  }
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options) {
  add_param_group(std::move(params), options);
}

Adam::Adam(std::vector<ParamGroup<AdamOptions>> groups) {
  FSDP_CHECK(!groups.empty(), ValueError, "optimizer got an empty parameter list");
  add_groups(std::move(groups));
}

void Adam::step() {
  autograd::NoGradGuard no_grad;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi)
    adam_step(groups_[gi], options_[gi], false, "Adam.step");
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options) {
  add_param_group(std::move(params), options);
}

AdamW::AdamW(std::vector<ParamGroup<AdamWOptions>> groups) {
  FSDP_CHECK(!groups.empty(), ValueError, "optimizer got an empty parameter list");
  add_groups(std::move(groups));
}

void AdamW::step() {
  autograd::NoGradGuard no_grad;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi)
    adam_step(groups_[gi], options_[gi], true, "AdamW.step");
}

}  // namespace fsdp::optim
