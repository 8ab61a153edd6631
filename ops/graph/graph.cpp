#include "ops/graph/graph.h"

#include <fmt/format.h>

#include <cctype>
#include <sstream>

#include "core/error.h"

namespace fsdp::ops::graph {

const char* op_name(NodeOp op) {
  switch (op) {
    case NodeOp::placeholder:
      return "placeholder";
    case NodeOp::call_function:
      return "call_function";
    case NodeOp::call_method:
      return "call_method";
    case NodeOp::call_module:
      return "call_module";
    case NodeOp::get_attr:
      return "get_attr";
    case NodeOp::output:
      return "output";
  }
  return "?";
}

Argument Argument::node(std::int32_t index) {
  Argument a;
  a.kind_ = Kind::Node;
  a.index_ = index;
  return a;
}

Argument Argument::list(std::vector<Argument> items) {
  Argument a;
  a.kind_ = Kind::List;
  a.items_ = std::move(items);
  return a;
}

FunctionTargetPtr getitem_target() {
  static const FunctionTargetPtr target = std::make_shared<const FunctionTarget>(
      FunctionTarget{"getitem", [](const std::vector<Object>& args, const Kwargs&) -> Object {
                       FSDP_CHECK(args.size() == 2, TypeError,
                                  "getitem: expected 2 arguments, got {}", args.size());
                       const auto i = static_cast<std::size_t>(args[1].value().to_int());
                       return Object(args[0].value()[i]);
                     }});
  return target;
}

namespace {
// FX's node naming: a valid identifier from the hint, made unique with _1, _2, ...
std::string sanitize(const std::string& hint) {
  std::string s;
  for (char c : hint) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "_" + s;
  return s;
}
}  // namespace

std::int32_t Graph::add(Node n, const std::string& name_hint) {
  FSDP_CHECK(nodes_.empty() || nodes_.back().op != NodeOp::output, RuntimeError,
             "Graph: cannot add a {} node after the output node", op_name(n.op));
  const std::string base = sanitize(name_hint);
  int& count = name_counts_[base];
  n.name = count == 0 ? base : fmt::format("{}_{}", base, count);
  ++count;
  name_counts_[n.name];  // a later "add_1" hint must not collide with this name
  nodes_.push_back(std::move(n));
  return static_cast<std::int32_t>(nodes_.size() - 1);
}

std::int32_t Graph::placeholder(const std::string& name) {
  return add(Node{NodeOp::placeholder, "", name, nullptr, {}, {}, {}}, name);
}

std::int32_t Graph::get_attr(const std::string& qualname) {
  return add(Node{NodeOp::get_attr, "", qualname, nullptr, {}, {}, {}}, qualname);
}

std::int32_t Graph::call_function(FunctionTargetPtr fn, std::vector<Argument> args,
                                  std::vector<std::pair<std::string, Argument>> kwargs,
                                  const std::string& name_hint) {
  FSDP_CHECK(fn != nullptr, ValueError, "Graph::call_function: the target is null");
  std::string hint = name_hint.empty() ? fn->name : name_hint;
  std::string target = fn->name;
  return add(
      Node{
          NodeOp::call_function, "", target, std::move(fn), std::move(args), std::move(kwargs), {}},
      hint);
}

std::int32_t Graph::call_method(const std::string& method, std::vector<Argument> args,
                                std::vector<std::pair<std::string, Argument>> kwargs) {
  return add(Node{NodeOp::call_method, "", method, nullptr, std::move(args), std::move(kwargs), {}},
             method);
}

std::int32_t Graph::call_module(const std::string& qualname, std::vector<Argument> args,
                                std::vector<std::pair<std::string, Argument>> kwargs) {
  return add(
      Node{NodeOp::call_module, "", qualname, nullptr, std::move(args), std::move(kwargs), {}},
      qualname);
}

std::int32_t Graph::output(Argument result) {
  return add(Node{NodeOp::output, "", "output", nullptr, {std::move(result)}, {}, {}}, "output");
}

namespace {
bool uses(const Argument& a, std::int32_t i) {
  if (a.kind() == Argument::Kind::Node) return a.node_index() == i;
  if (a.kind() == Argument::Kind::List)
    for (const auto& e : a.items())
      if (uses(e, i)) return true;
  return false;
}
}  // namespace

std::vector<std::int32_t> Graph::users(std::int32_t i) const {
  std::vector<std::int32_t> out;
  for (std::size_t k = 0; k < nodes_.size(); ++k) {
    bool used = false;
    for (const auto& a : nodes_[k].args) used = used || uses(a, i);
    for (const auto& [name, a] : nodes_[k].kwargs) used = used || uses(a, i);
    if (used) out.push_back(static_cast<std::int32_t>(k));
  }
  return out;
}

std::vector<std::int32_t> Graph::find_nodes(NodeOp op) const {
  std::vector<std::int32_t> out;
  for (std::size_t k = 0; k < nodes_.size(); ++k)
    if (nodes_[k].op == op) out.push_back(static_cast<std::int32_t>(k));
  return out;
}

std::string repr(const nn::Value& v) {
  if (v.is_none()) return "None";
  if (v.is_bool()) return v.to_bool() ? "True" : "False";
  if (v.is_int()) return std::to_string(v.to_int());
  if (v.is_double()) {
    std::string s = fmt::format("{}", v.to_double());
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // Python's 1.0, not 1
    return s;
  }
  if (v.is_string()) return "'" + v.str() + "'";
  if (v.is_tensor()) return v.tensor().defined() ? v.tensor().str() : "None";
  std::string s = "(";
  const auto& t = v.tuple();
  for (std::size_t i = 0; i < t.size(); ++i) s += (i ? ", " : "") + repr(t[i]);
  return s + (t.size() == 1 ? ",)" : ")");
}

std::string repr(const Argument& a, const Graph& g) {
  switch (a.kind()) {
    case Argument::Kind::Node:
      return "%" + g.node(a.node_index()).name;
    case Argument::Kind::Constant:
      return repr(a.constant());
    case Argument::Kind::List: {
      std::string s = "[";
      for (std::size_t i = 0; i < a.items().size(); ++i)
        s += (i ? ", " : "") + repr(a.items()[i], g);
      return s + "]";
    }
  }
  return "?";
}

std::string Graph::str() const {
  std::ostringstream os;
  os << "graph():\n";
  for (std::size_t k = 0; k < nodes_.size(); ++k) {
    const Node& n = nodes_[k];
    if (n.op == NodeOp::output) {
      std::string r = repr(n.args.at(0), *this);
      if (!r.empty() && r[0] == '%') r = r.substr(1);
      os << "    return " << r << "\n";
      continue;
    }
    os << "    %" << n.name << " : [num_users=" << users(static_cast<std::int32_t>(k)).size()
       << "] = " << op_name(n.op) << "[target=" << n.target << "]";
    if (n.op != NodeOp::placeholder && n.op != NodeOp::get_attr) {
      os << "(args = (";
      for (std::size_t i = 0; i < n.args.size(); ++i)
        os << (i ? ", " : "") << repr(n.args[i], *this);
      os << (n.args.size() == 1 ? ",)" : ")") << ", kwargs = {";
      for (std::size_t i = 0; i < n.kwargs.size(); ++i)
        os << (i ? ", " : "") << n.kwargs[i].first << ": " << repr(n.kwargs[i].second, *this);
      os << "})";
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace fsdp::ops::graph
