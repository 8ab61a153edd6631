#include "core/optim/sgd.h"

#include "core/autograd.h"
#include "core/error.h"
#include "core/kernels/kernel_table.h"
#include "core/optim/update_kernels.h"

namespace fsdp::optim {

void SGDOptions::validate() const {
  FSDP_CHECK(lr >= 0.0, ValueError, "Invalid learning rate: {}", lr);
  FSDP_CHECK(momentum >= 0.0, ValueError, "Invalid momentum value: {}", momentum);
  FSDP_CHECK(weight_decay >= 0.0, ValueError, "Invalid weight_decay value: {}", weight_decay);
  FSDP_CHECK(!nesterov || (momentum > 0.0 && dampening == 0.0), ValueError,
             "Nesterov momentum requires a momentum and zero dampening");
}

std::map<std::string, double> SGDOptions::to_map() const {
  return {{"lr", lr},
          {"momentum", momentum},
          {"dampening", dampening},
          {"weight_decay", weight_decay},
          {"nesterov", nesterov ? 1.0 : 0.0},
          {"maximize", maximize ? 1.0 : 0.0}};
}

SGDOptions SGDOptions::from_map(const std::map<std::string, double>& m) {
  SGDOptions o{option_value(m, "lr"),
               option_value(m, "momentum"),
               option_value(m, "dampening"),
               option_value(m, "weight_decay"),
               option_value(m, "nesterov") != 0,
               option_value(m, "maximize") != 0};
  o.validate();
  return o;
}

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options) {
  add_param_group(std::move(params), options);
}

SGD::SGD(std::vector<ParamGroup<SGDOptions>> groups) {
  FSDP_CHECK(!groups.empty(), ValueError, "optimizer got an empty parameter list");
  add_groups(std::move(groups));
}

void SGD::step() {
  autograd::NoGradGuard no_grad;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    const SGDOptions& o = options_[gi];
    Group& g = groups_[gi];
    for (std::size_t i = 0; i < g.params.size(); ++i) {
      const Tensor& p = g.params[i];
      Tensor grad = p.grad();
      if (!grad.defined() || p.is_meta()) continue;
      check_step_inputs("SGD.step", p, grad);
      grad = grad.contiguous();
      ParamState& s = g.state[i];
      Tensor buf;
      bool first = false;
      if (o.momentum != 0.0) {
        auto it = s.tensors.find("momentum_buffer");
        first = it == s.tensors.end();
        if (first) it = s.tensors.emplace("momentum_buffer", empty_like(p)).first;
        buf = it->second;
      }
      const SgdScalars k{o.lr,       o.momentum, o.dampening, o.weight_decay,
                         o.nesterov, o.maximize, first};
      kernels(p.device()).sgd_update(p, grad, buf, k);
      p.storage()->bump_version();
    }
  }
}

}  // namespace fsdp::optim
