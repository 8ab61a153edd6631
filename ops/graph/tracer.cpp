#include "ops/graph/tracer.h"

#include <fmt/format.h>

#include "core/error.h"

namespace fsdp::ops::graph {

namespace {
// The node name of an op: "add.Scalar" -> "add".
std::string base_name(const char* op) {
  std::string s(op);
  return s.substr(0, s.find('.'));
}

// A call_function target that reruns a recorded core op on the tensors among its arguments.
FunctionTargetPtr op_target(const dispatch::OpCall& call) {
  auto kinds = call.arg_kinds();
  auto invoker = call.invoker();
  return std::make_shared<const FunctionTarget>(FunctionTarget{
      call.name(), [kinds, invoker](const std::vector<Object>& args, const Kwargs&) -> Object {
        std::vector<Tensor> inputs;
        for (std::size_t i = 0; i < kinds.size(); ++i) {
          if (kinds[i] == dispatch::ArgKind::Other) continue;
          const nn::Value& v = args.at(i).value();
          if (kinds[i] == dispatch::ArgKind::Tensor) {
            inputs.push_back(v.is_tensor() ? v.tensor() : Tensor());
          } else {
            for (const auto& e : v.tuple()) inputs.push_back(e.tensor());
          }
        }
        return Object(invoker(inputs));
      }});
}
}  // namespace

Tracer::Tracer(GraphModulePtr module, Tracer* parent)
    : module_(std::move(module)), parent_(parent) {}

std::int32_t Tracer::add_input(const Tensor& t, const std::string& name) {
  const std::int32_t n = graph().placeholder(name);
  nodes_[t.impl()] = n;
  alive_.push_back(t);
  return n;
}

void Tracer::add_named_tensors(const std::vector<std::pair<std::string, Tensor>>& named) {
  for (const auto& [name, t] : named)
    if (t.defined()) {
      attr_names_.emplace(t.impl(), name);
      alive_.push_back(t);
    }
}

Argument Tracer::proxy(const nn::Value& v) {
  if (v.is_tuple()) {
    std::vector<Argument> items;
    for (const auto& e : v.tuple()) items.push_back(proxy(e));
    return Argument::list(std::move(items));
  }
  if (!v.is_tensor()) return Argument(v);
  const Tensor& t = v.tensor();
  if (!t.defined()) return Argument();
  if (auto it = nodes_.find(t.impl()); it != nodes_.end()) return Argument::node(it->second);
  std::int32_t n;
  if (parent_ && (parent_->knows(t) || parent_->attr_names_.count(t.impl()))) {
    // A tensor of the enclosing trace: an extra input of this body (upstream lifts free
    // variables of a higher-order operator's body the same way).
    lifted_.push_back(parent_->proxy(v));
    n = graph().placeholder(fmt::format("lifted_{}", lifted_.size() - 1));
  } else {
    auto named = attr_names_.find(t.impl());
    std::string qualname =
        named != attr_names_.end() ? named->second : module_->fresh_qualname("_tensor_constant");
    module_->set_tensor_attr(qualname, t);
    n = graph().get_attr(qualname);
  }
  nodes_[t.impl()] = n;
  alive_.push_back(t);
  return Argument::node(n);
}

void Tracer::track(const nn::Value& out, std::int32_t node) {
  if (out.is_tensor()) {
    if (!out.tensor().defined()) return;
    nodes_[out.tensor().impl()] = node;
    alive_.push_back(out.tensor());
  } else if (out.is_tuple()) {
    const auto& items = out.tuple();
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_tensor() && !items[i].is_tuple()) continue;
      const std::int32_t item = graph().call_function(
          getitem_target(), {Argument::node(node), Argument(nn::Value(std::int64_t(i)))});
      track(items[i], item);
    }
  }
}

nn::Value Tracer::handle(const dispatch::OpCall& call) {
  nn::Value out = call.run();
  if (leaf_depth_ > 0) return out;  // inside a leaf module: its call_module node stands for it
  std::vector<Argument> args;
  args.reserve(call.args().size());
  for (const auto& a : call.args()) args.push_back(proxy(a));
  track(out, graph().call_function(op_target(call), std::move(args), {}, base_name(call.name())));
  return out;
}

Tracer::Subgraph Tracer::trace_subgraph(const Function& fn, const std::vector<nn::Value>& args) {
  auto gm = std::make_shared<GraphModule>();
  auto sub = std::make_shared<Tracer>(gm, this);
  std::vector<Tensor> inputs;
  for (const auto& a : args) flatten_tensors(a, inputs);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    sub->add_input(inputs[i], fmt::format("arg{}", i));
  nn::Value out;
  {
    dispatch::ModeGuard guard(sub);
    out = fn(nn::Args(args));
  }
  gm->graph.output(sub->proxy(out));
  // Placeholders bind in graph order: the arguments' first, then the lifted ones (created in
  // use order), which is the order of `lifted`.
  Subgraph s{gm, sub->lifted_, out};
  return s;
}

void Tracer::enter_leaf(const std::string& qualname, const nn::Args& args) {
  if (leaf_depth_++ > 0) return;
  std::vector<Argument> a;
  for (const auto& v : args.positional) a.push_back(proxy(v));
  leaf_calls_.emplace_back(qualname, std::move(a));
}

void Tracer::exit_leaf(const nn::Value& out) {
  if (--leaf_depth_ > 0) return;
  auto [qualname, args] = std::move(leaf_calls_.back());
  leaf_calls_.pop_back();
  track(out, graph().call_module(qualname, std::move(args)));
}

GraphModulePtr trace(const Function& fn, const std::vector<nn::Value>& example_args) {
  auto gm = std::make_shared<GraphModule>();
  auto tracer = std::make_shared<Tracer>(gm);
  std::vector<Tensor> inputs;
  for (const auto& a : example_args) flatten_tensors(a, inputs);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    tracer->add_input(inputs[i], fmt::format("arg{}", i));
  nn::Value out;
  {
    dispatch::ModeGuard guard(tracer);
    out = fn(nn::Args(example_args));
  }
  gm->graph.output(tracer->proxy(out));
  return gm;
}

GraphModulePtr trace_module(const nn::ModulePtr& module, const std::vector<nn::Value>& example_args,
                            const TraceOptions& options) {
  auto gm = std::make_shared<GraphModule>();
  auto tracer = std::make_shared<Tracer>(gm);
  tracer->add_named_tensors(module->named_parameters());
  tracer->add_named_tensors(module->named_buffers());
  std::vector<HookHandle> handles;
  if (options.is_leaf_module) {
    for (const auto& [qualname, m] : module->named_modules()) {
      if (m == module || !options.is_leaf_module(*m, qualname)) continue;
      gm->set_module_attr(qualname, m);
      Tracer* t = tracer.get();
      std::string q = qualname;
      handles.push_back(m->register_forward_pre_hook(
          [t, q](nn::Module&, const nn::Args& a) -> std::optional<nn::Args> {
            t->enter_leaf(q, a);
            return std::nullopt;
          }));
      handles.push_back(m->register_forward_hook(
          [t](nn::Module&, const nn::Args&, const nn::Value& out) -> std::optional<nn::Value> {
            t->exit_leaf(out);
            return std::nullopt;
          }));
    }
  }
  std::vector<Tensor> inputs;
  for (const auto& a : example_args) flatten_tensors(a, inputs);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    tracer->add_input(inputs[i], fmt::format("arg{}", i));
  nn::Value out;
  try {
    dispatch::ModeGuard guard(tracer);
    out = (*module)(nn::Args(example_args));
  } catch (...) {
    for (auto& h : handles) h.remove();
    throw;
  }
  for (auto& h : handles) h.remove();
  gm->graph.output(tracer->proxy(out));
  return gm;
}

}  // namespace fsdp::ops::graph
