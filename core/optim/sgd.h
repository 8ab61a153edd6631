// torch.optim.SGD: stochastic gradient descent with optional momentum (the first step copies
// the gradient into the momentum buffer), dampening, weight decay, Nesterov momentum and
// maximisation.
#pragma once

#include "core/optim/optimizer.h"

namespace fsdp::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;

  void validate() const;  // ValueError with torch's messages
  std::map<std::string, double> to_map() const;
  static SGDOptions from_map(const std::map<std::string, double>& m);
};

class SGD : public OptimizerWith<SGDOptions> {
 public:
  explicit SGD(std::vector<Tensor> params, const SGDOptions& options = {});
  explicit SGD(std::vector<ParamGroup<SGDOptions>> groups);
  void step() override;

 protected:
  bool counts_steps() const override { return false; }
};

}  // namespace fsdp::optim
