// The optimizer base (torch.optim.Optimizer): parameter groups with their own hyperparameters,
// per-parameter state, zero_grad, and a state dict for checkpoint/resume. Parameters whose
// gradient is undefined are skipped by step(), as in PyTorch.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace fsdp::optim {

// One parameter's state: named tensors (momentum_buffer, exp_avg, ...) and its step count.
struct ParamState {
  std::int64_t step = 0;
  std::map<std::string, Tensor> tensors;
};

// torch's optimizer.state_dict(): state by parameter index (numbered through the groups in
// order), each group's hyperparameters, and each group's parameter indices. Optimizers that
// count steps store "step" as a float32 scalar tensor, as PyTorch does.
struct OptimizerStateDict {
  std::map<std::int64_t, std::map<std::string, Tensor>> state;
  std::vector<std::map<std::string, double>> param_groups;
  std::vector<std::vector<std::int64_t>> group_params;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient.
  virtual void step() = 0;
  // Clears the gradients: set to undefined (set_to_none) or filled with zeros.
  void zero_grad(bool set_to_none = true);

  std::size_t num_param_groups() const { return groups_.size(); }
  const std::vector<Tensor>& params(std::size_t group) const;
  const ParamState& state(std::size_t group, std::size_t index) const;
  // A group's hyperparameters by torch's names ("lr", "momentum", "beta1", ...).
  virtual std::map<std::string, double> group_options(std::size_t group) const = 0;
  double lr(std::size_t group = 0) const { return group_options(group).at("lr"); }
  virtual void set_lr(double lr, std::size_t group) = 0;
  void set_lr(double lr);  // every group

  OptimizerStateDict state_dict() const;
  // Restores state and hyperparameters (ValueError when the groups' sizes differ). Tensors are
  // copied, converted to each parameter's dtype and device.
  void load_state_dict(const OptimizerStateDict& sd);

 protected:
  Optimizer() = default;
  struct Group {
    std::vector<Tensor> params;
    std::vector<ParamState> state;
  };
  // Validates (ValueError "optimizer got an empty parameter list") and appends a group.
  void add_group(std::vector<Tensor> params);
  virtual void set_group_options(std::size_t group, const std::map<std::string, double>& o) = 0;
  // Whether the state dict carries a "step" per parameter.
  virtual bool counts_steps() const = 0;

  std::vector<Group> groups_;
};

// Scalars the update kernels read: a parameter, its gradient and its state buffers as flat
// contiguous arrays of the same dtype.
void check_step_inputs(const char* op, const Tensor& param, const Tensor& grad);

}  // namespace fsdp::optim

namespace fsdp::optim {

// A group of parameters with its own hyperparameters (Python's param_groups entries).
template <typename Options>
struct ParamGroup {
  std::vector<Tensor> params;
  Options options;
};

// The typed half of an optimizer: one Options value per group. Options provides validate(),
// to_map() and from_map() (torch's hyperparameter names).
template <typename Options>
class OptimizerWith : public Optimizer {
 public:
  void add_param_group(std::vector<Tensor> params, const Options& o) {
    o.validate();
    add_group(std::move(params));
    options_.push_back(o);
  }
  const Options& options(std::size_t group = 0) const { return options_.at(group); }
  Options& options(std::size_t group = 0) { return options_.at(group); }
  std::map<std::string, double> group_options(std::size_t group) const override {
    return options_.at(group).to_map();
  }
  using Optimizer::set_lr;
  void set_lr(double lr, std::size_t group) override { options_.at(group).lr = lr; }

 protected:
  void add_groups(std::vector<ParamGroup<Options>> groups) {
    for (auto& g : groups) add_param_group(std::move(g.params), g.options);
  }
  void set_group_options(std::size_t group, const std::map<std::string, double>& o) override {
    options_.at(group) = Options::from_map(o);
  }
  std::vector<Options> options_;
};

// Reads key from a hyperparameter map (KeyError naming it when absent).
double option_value(const std::map<std::string, double>& m, const char* key);

}  // namespace fsdp::optim
