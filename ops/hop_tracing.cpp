#include "ops/hop_tracing.h"

#include "core/error.h"
#include "ops/graph/tracer.h"

namespace fsdp::ops {

graph::FunctionTargetPtr hop_target(const HigherOrderOperator& op) {
  const HigherOrderOperator* p = &op;
  return std::make_shared<const graph::FunctionTarget>(
      graph::FunctionTarget{op.name(),
                            [p](const std::vector<Object>& args, const Kwargs& kwargs) -> Object {
                              return Object((*p)(HopArgs{args, kwargs}));
                            },
                            p});
}

nn::Value record_hop_node(const KernelContext& ctx, const std::vector<nn::Value>& leading,
                          const Function& body, const std::vector<nn::Value>& args,
                          const Kwargs& kwargs,
                          const std::function<void(graph::GraphModule&)>& on_body) {
  auto* tracer = dynamic_cast<graph::Tracer*>(ctx.mode.get());
  FSDP_CHECK(tracer != nullptr, TypeError, "{}: the Tracing rule needs a Tracer, got {}",
             ctx.op.name(), ctx.mode ? ctx.mode->name() : std::string("no mode"));
  graph::Tracer::Subgraph sub = tracer->trace_subgraph(body, args);
  if (on_body) on_body(*sub.module);
  const std::string qualname = tracer->module().fresh_qualname("wrap_body");
  tracer->module().set_module_attr(qualname, sub.module);
  std::vector<graph::Argument> node_args;
  for (const auto& v : leading) node_args.emplace_back(v);
  node_args.push_back(graph::Argument::node(tracer->graph().get_attr(qualname)));
  for (const auto& v : args) node_args.push_back(tracer->proxy(v));
  for (const auto& l : sub.lifted) node_args.push_back(l);
  std::vector<std::pair<std::string, graph::Argument>> node_kwargs;
  for (const auto& [k, v] : kwargs)
    if (v.is_value()) node_kwargs.emplace_back(k, tracer->proxy(v.value()));
  const std::int32_t node = tracer->graph().call_function(hop_target(ctx.op), std::move(node_args),
                                                          std::move(node_kwargs));
  tracer->track(sub.out, node);
  return sub.out;
}

}  // namespace fsdp::ops
