// Interpreter: runs a graph module's graph node by node on given inputs (FX's Interpreter). With
// node metadata preserved (PreserveNodeMetaGuard), the node being run is visible to the ops it
// calls through current_node_meta(): selective checkpointing tags nodes this way.
#pragma once

#include <vector>

#include "ops/graph/graph_module.h"

namespace fsdp::ops::graph {

class Interpreter {
 public:
  explicit Interpreter(GraphModulePtr module);
  // One positional argument per placeholder, in order.
  nn::Value run(const std::vector<nn::Value>& args);

 private:
  Object evaluate(const Argument& a, const std::vector<Object>& env) const;
  Object call_method(const Node& n, const std::vector<Object>& args) const;
  GraphModulePtr module_;
};

// fx_traceback.preserve_node_meta(): while alive, interpreters publish the running node.
class PreserveNodeMetaGuard {
 public:
  PreserveNodeMetaGuard();
  ~PreserveNodeMetaGuard();
  PreserveNodeMetaGuard(const PreserveNodeMetaGuard&) = delete;
  PreserveNodeMetaGuard& operator=(const PreserveNodeMetaGuard&) = delete;

 private:
  bool prev_;
};
// The metadata of the node an interpreter is running (under PreserveNodeMetaGuard), or null.
NodeMeta* current_node_meta();

}  // namespace fsdp::ops::graph
