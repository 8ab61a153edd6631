// trace_wrapped (torch/_dynamo/_trace_wrapped_higher_order_op.py): trace_wrapped(*args, fn) is
// fn(*args) run without grad, except that a Tracer does not trace into fn: it records one
// "trace_wrapped" node calling fn, whose result is a fresh tensor with the metadata of the
// gradient argument (args[1] when args[0] is None, else args[0]). fn must therefore return a new
// tensor with that metadata. Per key:
//   Dense: fn(*args) (no mode may be active: "Mode should never be enabled for CPU/CUDA key");
//   Tracing: the node above; Fake: RuntimeError("This op should never be invoked here");
//   Autograd (the operator called directly with grad on and an input requiring grad): runs below
//     autograd and marks the outputs with a node that raises "Autograd not implemented for
//     trace_wrapped" only if backward reaches it;
//   Functionalize: unwrap, redispatch, wrap.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "ops/higher_order_op.h"

namespace fsdp::ops {

// Compiled autograd's backward state: under a Tracer, the node that stands for it.
struct BackwardState {
  std::optional<std::int32_t> proxy;
};

const HigherOrderOperator& trace_wrapped_op();

nn::Value trace_wrapped(const std::vector<nn::Value>& args, const Function& fn,
                        std::shared_ptr<BackwardState> bw_state = nullptr);

}  // namespace fsdp::ops
