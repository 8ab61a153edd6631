// The Tracing rule shared by the higher-order operators that take a body: trace the body on the
// call's inputs into a nested graph module, register it on the tracer's graph module as
// "wrap_body_<i>", and record one call_function node
//   op(*leading, get_attr(wrap_body_<i>), *inputs, *lifted, **kwargs)
// whose result stands for the body's result.
#pragma once

#include <functional>
#include <vector>

#include "ops/graph/graph_module.h"
#include "ops/higher_order_op.h"

namespace fsdp::ops {

// The call_function target of a higher-order operator node: calls the operator.
graph::FunctionTargetPtr hop_target(const HigherOrderOperator& op);

// ctx.mode must be a graph::Tracer. Keyword arguments that are values are recorded as constants;
// others (functions, opaque objects) are left out of the node. `on_body` may adjust the body.
nn::Value record_hop_node(const KernelContext& ctx, const std::vector<nn::Value>& leading,
                          const Function& body, const std::vector<nn::Value>& args,
                          const Kwargs& kwargs,
                          const std::function<void(graph::GraphModule&)>& on_body = {});

}  // namespace fsdp::ops
