// The graph IR: a list of nodes (placeholder, call_function, call_method, call_module, get_attr,
// output) with arguments, keyword arguments and a metadata map, PyTorch FX's vocabulary. Nodes are
// plain structs that refer to each other by index; a graph is printed in FX's format.
#pragma once

#include <any>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ops/object.h"

namespace fsdp::ops {
class HigherOrderOperator;
}

namespace fsdp::ops::graph {

enum class NodeOp : std::uint8_t {
  placeholder,
  call_function,
  call_method,
  call_module,
  get_attr,
  output
};
const char* op_name(NodeOp op);  // "call_function"

// An argument of a node: another node's result, a constant value, or a list of arguments.
class Argument {
 public:
  enum class Kind : std::uint8_t { Node, Constant, List };
  Argument() : kind_(Kind::Constant) {}                                                    // None
  Argument(nn::Value constant) : kind_(Kind::Constant), constant_(std::move(constant)) {}  // NOLINT
  static Argument node(std::int32_t index);
  static Argument list(std::vector<Argument> items);

  Kind kind() const { return kind_; }
  std::int32_t node_index() const { return index_; }
  const nn::Value& constant() const { return constant_; }
  const std::vector<Argument>& items() const { return items_; }

 private:
  Kind kind_;
  std::int32_t index_ = -1;
  nn::Value constant_;
  std::vector<Argument> items_;
};

// The callee of a call_function node: a core op (rerun through its recorded invoker), a
// higher-order operator, or a helper such as getitem.
struct FunctionTarget {
  std::string name;
  std::function<Object(const std::vector<Object>& args, const Kwargs& kwargs)> fn;
  const HigherOrderOperator* hop = nullptr;
};
using FunctionTargetPtr = std::shared_ptr<const FunctionTarget>;
// getitem(value, i): element i of a tuple (multi-output ops).
FunctionTargetPtr getitem_target();

using NodeMeta = std::map<std::string, std::any>;

struct Node {
  NodeOp op;
  std::string name;    // unique in the graph
  std::string target;  // placeholder name, method, module or attribute qualname; function name
  FunctionTargetPtr function;  // call_function only
  std::vector<Argument> args;
  std::vector<std::pair<std::string, Argument>> kwargs;
  NodeMeta meta;
};

class Graph {
 public:
  std::int32_t placeholder(const std::string& name);
  std::int32_t get_attr(const std::string& qualname);
  std::int32_t call_function(FunctionTargetPtr fn, std::vector<Argument> args,
                             std::vector<std::pair<std::string, Argument>> kwargs = {},
                             const std::string& name_hint = "");
  std::int32_t call_method(const std::string& method, std::vector<Argument> args,
                           std::vector<std::pair<std::string, Argument>> kwargs = {});
  std::int32_t call_module(const std::string& qualname, std::vector<Argument> args,
                           std::vector<std::pair<std::string, Argument>> kwargs = {});
  std::int32_t output(Argument result);

  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<Node>& nodes() { return nodes_; }
  const Node& node(std::int32_t i) const { return nodes_.at(static_cast<std::size_t>(i)); }
  Node& node(std::int32_t i) { return nodes_.at(static_cast<std::size_t>(i)); }
  std::size_t size() const { return nodes_.size(); }
  // The nodes that use node i, in graph order.
  std::vector<std::int32_t> users(std::int32_t i) const;
  // Nodes of one op kind, in order.
  std::vector<std::int32_t> find_nodes(NodeOp op) const;

  // FX's format:
  //   graph():
  //       %arg0 : [num_users=1] = placeholder[target=arg0]
  //       %mm : [num_users=1] = call_function[target=mm](args = (%arg0, %arg1), kwargs = {})
  //       return mm
  std::string str() const;

 private:
  std::int32_t add(Node n, const std::string& name_hint);
  std::vector<Node> nodes_;
  std::map<std::string, int> name_counts_;
};

// Python's repr of a value ("1.0", "True", "'none'", "(1, 2)", "None", "tensor([2, 3], ...)").
std::string repr(const nn::Value& v);
std::string repr(const Argument& a, const Graph& g);

}  // namespace fsdp::ops::graph
