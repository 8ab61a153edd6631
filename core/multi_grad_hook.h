// register_multi_grad_hook: one callback per backward pass over the gradients of several tensors
// (torch.autograd.graph.register_multi_grad_hook, mode "all"). FSDP uses it for units whose
// parameters are partly frozen and for its pre-backward hook on a unit's outputs.
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"

namespace fsdp::autograd {

// Runs fn once per backward pass that reaches any of `tensors`, as soon as every gradient of them
// that this pass computes is computed. grads[i] is the gradient of tensors[i], undefined for a
// tensor the pass does not reach (or whose gradient it leaves undefined). Tensors that do not
// require grad are skipped. Under autograd::grad, leaf tensors are captured, not accumulated, so
// their hooks do not run. Removing the handle stops fn from running.
HookHandle register_multi_grad_hook(const std::vector<Tensor>& tensors,
                                    std::function<void(const std::vector<Tensor>& grads)> fn);

}  // namespace fsdp::autograd
