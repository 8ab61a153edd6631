// Tracer: a dispatch mode that records the core ops a function runs (and, optionally, calls of
// leaf modules) into a graph module while running them on real tensors, like make_fx with real
// inputs. Tensors become placeholders (inputs), node results, get_attr nodes (parameters and
// buffers of a traced module by FQN, other tensors as `_tensor_constant<i>`), or, inside a nested
// trace, extra inputs lifted from the enclosing trace. A higher-order operator is recorded as one
// node whose body is a nested graph module (its Tracing rule uses trace_subgraph).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dispatch/dispatch_mode.h"
#include "ops/graph/graph_module.h"

namespace fsdp::ops::graph {

struct TraceOptions {
  // A module for which this is true is recorded as one call_module node (FX's leaf modules);
  // by default every module is traced through (make_fx).
  std::function<bool(const nn::Module& module, const std::string& qualname)> is_leaf_module;
};

class Tracer : public dispatch::DispatchMode {
 public:
  explicit Tracer(GraphModulePtr module, Tracer* parent = nullptr);
  std::string name() const override { return "Tracer"; }
  dispatch::ModeKind kind() const override { return dispatch::ModeKind::Tracing; }
  nn::Value handle(const dispatch::OpCall& call) override;

  GraphModule& module() { return *module_; }
  Graph& graph() { return module_->graph; }

  // A placeholder node standing for tensor t.
  std::int32_t add_input(const Tensor& t, const std::string& name);
  // The argument standing for a value: tensors by their nodes, tuples as lists, else constants.
  Argument proxy(const nn::Value& v);
  // Maps the tensors of `out` to `node` (tuple elements through getitem nodes).
  void track(const nn::Value& out, std::int32_t node);
  // Names parameters and buffers (get_attr targets) of a traced module.
  void add_named_tensors(const std::vector<std::pair<std::string, Tensor>>& named);

  struct Subgraph {
    GraphModulePtr module;
    std::vector<Argument> lifted;  // in this graph: the tensors the body reads from outside
    nn::Value out;                 // the body's result on the example inputs
  };
  // Traces fn(args) into a nested graph module (one placeholder per tensor argument, then one per
  // lifted tensor) with this tracer as the enclosing trace.
  Subgraph trace_subgraph(const Function& fn, const std::vector<nn::Value>& args);

  // Leaf-module bookkeeping (trace_module's hooks).
  void enter_leaf(const std::string& qualname, const nn::Args& args);
  void exit_leaf(const nn::Value& out);

 private:
  bool knows(const Tensor& t) const { return nodes_.count(t.impl()) > 0; }
  GraphModulePtr module_;
  Tracer* parent_;
  std::unordered_map<const TensorImpl*, std::int32_t> nodes_;
  std::unordered_map<const TensorImpl*, std::string> attr_names_;
  std::vector<Tensor> alive_;  // keeps mapped tensors alive so their addresses stay theirs
  std::vector<Argument> lifted_;
  int leaf_depth_ = 0;
  std::vector<std::pair<std::string, std::vector<Argument>>> leaf_calls_;
};

// Traces fn on example arguments: one placeholder per tensor argument (arg0, arg1, ...); other
// arguments are specialised into the graph.
GraphModulePtr trace(const Function& fn, const std::vector<nn::Value>& example_args);
// Traces module(example_args); its parameters and buffers become get_attr nodes by FQN.
GraphModulePtr trace_module(const nn::ModulePtr& module, const std::vector<nn::Value>& example_args,
                            const TraceOptions& options = {});

}  // namespace fsdp::ops::graph
