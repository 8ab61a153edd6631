// GraphModule: a module that owns a graph, the submodules it calls (call_module targets and the
// bodies of higher-order operators) and the tensors it reads (get_attr), and runs the graph with
// the interpreter when called. Its `meta` map carries graph-level data, e.g. the context function
// of selective checkpointing ("_checkpoint_context_fn").
#pragma once

#include <any>
#include <map>
#include <memory>
#include <string>

#include "core/module.h"
#include "ops/graph/graph.h"

namespace fsdp::ops::graph {

class GraphModule : public nn::Module {
 public:
  FSDP_MODULE_CLASS(GraphModule, nn::Module)
  explicit GraphModule(Graph g = {}) : nn::Module(static_class()), graph(std::move(g)) {}

  Graph graph;
  std::map<std::string, std::any> meta;

  // get_attr targets: a tensor or a module under a dotted qualname.
  void set_tensor_attr(const std::string& qualname, Tensor t);
  void set_module_attr(const std::string& qualname, nn::ModulePtr m);
  Object get_attr(const std::string& qualname) const;  // KeyError naming the qualname
  // "prefix_0", "prefix_1", ...: the first name no attribute has.
  std::string fresh_qualname(const std::string& prefix) const;

  // Runs the graph (Interpreter) on the positional arguments.
  nn::Value forward(const nn::Args& args) override;
  std::string code() const { return graph.str(); }

 private:
  std::map<std::string, Tensor> tensors_;
  std::map<std::string, nn::ModulePtr> modules_;
};
using GraphModulePtr = std::shared_ptr<GraphModule>;

}  // namespace fsdp::ops::graph
