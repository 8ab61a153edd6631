// The optimizers' update kernels over flat buffers: one pass over a parameter, its gradient and
// its state. Adam/AdamW/SGD call them per parameter; FSDP can call them on a whole flat shard
// (one call per unit instead of one per original parameter).
#pragma once

#include <cstdint>

namespace fsdp::optim {

// Adam(W)'s scalars for one step; `step` counts from 1 (bias correction).
struct AdamScalars {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled = false;  // AdamW: decay the parameter, not the gradient
  bool maximize = false;
  std::int64_t step = 1;
};

// One Adam(W) update of n elements in torch's order of operations; vmax (amsgrad) may be null.
// float and double.
template <typename T>
void adam_update_flat(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, T* max_exp_avg_sq,
                      std::int64_t n, const AdamScalars& s);

struct SgdScalars {
  double lr = 1e-3, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false, maximize = false;
  bool first_step = false;  // the momentum buffer is initialised from this step's direction
};

// One SGD update of n elements; momentum_buffer may be null (no momentum). float and double.
template <typename T>
void sgd_update_flat(T* param, const T* grad, T* momentum_buffer, std::int64_t n,
                     const SgdScalars& s);

}  // namespace fsdp::optim
