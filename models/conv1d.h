// transformers' Conv1D (pytorch_utils.py): a linear layer whose weight is stored [in, out],
// y = x W + b, as GPT-2's checkpoints hold it.
#pragma once

#include <cstdint>

#include "core/module.h"

namespace fsdp::models {

// weight [nx, nf] ~ N(0, 0.02) and bias [nf] = 0, as transformers initialises it.
class Conv1D : public nn::Module {
 public:
  static const nn::ModuleClass& static_class();
  // residual: a projection into the residual stream (GPT-2's c_proj), which transformers'
  // _init_weights draws with std / sqrt(2 * n_layer).
  Conv1D(std::int64_t nf, std::int64_t nx, TensorOptions options = {}, bool residual = false);

  nn::Value forward(const nn::Args& args) override { return forward(args.tensor(0)); }
  Tensor forward(const Tensor& x);
  void reset_parameters() override;
  std::string extra_repr() const override;

  const std::int64_t nf, nx;  // out, in
  const bool residual;
};

}  // namespace fsdp::models
