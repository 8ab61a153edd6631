#include "ops/graph/interpreter.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/ops.h"

namespace fsdp::ops::graph {

namespace {
thread_local bool t_preserve = false;
thread_local NodeMeta* t_current = nullptr;

// Restores the published node when a node finishes (interpreters nest: bodies of operators).
class CurrentNode {
 public:
  explicit CurrentNode(NodeMeta* meta) : prev_(t_current) {
    if (t_preserve) t_current = meta;
  }
  ~CurrentNode() { t_current = prev_; }

 private:
  NodeMeta* prev_;
};

Shape ints(const nn::Value& v) {
  Shape s;
  if (v.is_tuple()) {
    for (const auto& e : v.tuple()) s.push_back(e.to_int());
  } else {
    s.push_back(v.to_int());
  }
  return s;
}
}  // namespace

PreserveNodeMetaGuard::PreserveNodeMetaGuard() : prev_(t_preserve) {
  t_preserve = true;
}
PreserveNodeMetaGuard::~PreserveNodeMetaGuard() {
  t_preserve = prev_;
}
NodeMeta* current_node_meta() {
  return t_current;
}

Interpreter::Interpreter(GraphModulePtr module) : module_(std::move(module)) {
  FSDP_CHECK(module_ != nullptr, ValueError, "Interpreter: the graph module is null");
}

Object Interpreter::evaluate(const Argument& a, const std::vector<Object>& env) const {
  switch (a.kind()) {
    case Argument::Kind::Node:
      return env.at(static_cast<std::size_t>(a.node_index()));
    case Argument::Kind::Constant:
      return Object(a.constant());
    case Argument::Kind::List: {
      std::vector<nn::Value> items;
      for (const auto& e : a.items()) items.push_back(evaluate(e, env).value());
      return Object(nn::Value(std::move(items)));
    }
  }
  return Object();
}

Object Interpreter::call_method(const Node& n, const std::vector<Object>& args) const {
  FSDP_CHECK(!args.empty() && args[0].is_value() && args[0].value().is_tensor(), TypeError,
             "call_method {}: the first argument must be a Tensor", n.target);
  const Tensor& self = args[0].value().tensor();
  auto arg = [&](std::size_t i) -> const nn::Value& { return args.at(i).value(); };
  const std::string& m = n.target;
  if (m == "view") return Object(view(self, ints(arg(1))));
  if (m == "reshape") return Object(reshape(self, ints(arg(1))));
  if (m == "transpose") return Object(transpose(self, arg(1).to_int(), arg(2).to_int()));
  if (m == "t") return Object(transpose(self, 0, 1));
  if (m == "permute") return Object(permute(self, ints(arg(1))));
  if (m == "unsqueeze") return Object(unsqueeze(self, arg(1).to_int()));
  if (m == "squeeze") return Object(squeeze(self, arg(1).to_int()));
  if (m == "expand") return Object(expand(self, ints(arg(1))));
  if (m == "flatten") return Object(flatten(self));
  if (m == "contiguous") return Object(contiguous(self));
  if (m == "clone") return Object(clone(self));
  if (m == "detach") return Object(self.detach());
  if (m == "sum") return Object(args.size() > 1 ? sum(self, ints(arg(1))) : sum(self));
  if (m == "mean") return Object(args.size() > 1 ? mean(self, ints(arg(1))) : mean(self));
  throw NotImplementedError(
      fmt::format("call_method {}: Tensor has no method '{}' in the interpreter", n.name, m));
}

nn::Value Interpreter::run(const std::vector<nn::Value>& args) {
  Graph& g = module_->graph;
  std::vector<Object> env(g.size());
  std::size_t next_arg = 0;
  for (std::size_t k = 0; k < g.size(); ++k) {
    Node& n = g.nodes()[k];
    CurrentNode current(&n.meta);
    std::vector<Object> a;
    a.reserve(n.args.size());
    for (const auto& x : n.args) a.push_back(evaluate(x, env));
    Kwargs kw;
    for (const auto& [name, x] : n.kwargs) kw.emplace_back(name, evaluate(x, env));
    switch (n.op) {
      case NodeOp::placeholder:
        FSDP_CHECK(next_arg < args.size(), TypeError,
                   "Interpreter: the graph expects more inputs than the {} given (placeholder {})",
                   args.size(), n.name);
        env[k] = Object(args[next_arg++]);
        break;
      case NodeOp::get_attr:
        env[k] = module_->get_attr(n.target);
        break;
      case NodeOp::call_function:
        env[k] = n.function->fn(a, kw);
        break;
      case NodeOp::call_method:
        env[k] = call_method(n, a);
        break;
      case NodeOp::call_module: {
        nn::Args margs;
        for (const auto& x : a) margs.positional.push_back(x.value());
        for (const auto& [name, x] : kw) margs.kwargs.emplace(name, x.value());
        env[k] = Object((*module_->get_attr(n.target).module())(margs));
        break;
      }
      case NodeOp::output:
        return a.at(0).value();
    }
  }
  throw RuntimeError("Interpreter: the graph has no output node");
}

}  // namespace fsdp::ops::graph
