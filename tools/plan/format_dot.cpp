// The plan as a Graphviz graph: one cluster per unit, nested like the units.
#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <unordered_set>

#include "tools/plan/format.h"
#include "tools/plan/format_tree.h"

namespace fsdp::plan {

using namespace format_detail;

namespace {
std::string dot_escape(const std::string& s) {
  std::string o;
  // Inside a double-quoted DOT string: quotes and backslashes escaped, line breaks as \n, other
  // control characters dropped (they would end or corrupt the label).
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o += c;
  }
  return o;
}
}  // namespace

std::string format_dot(const Plan& plan) {
  // Clusters nest like the units: each unit's cluster holds the modules it is the nearest unit
  // of, and the clusters of the units directly inside it.
  std::vector<std::vector<std::string>> unit_nodes(plan.units.size());
  std::vector<std::string> loose_nodes, edges;
  std::unordered_map<const nn::Module*, std::size_t> node_id;
  const auto ignored = ignored_modules(plan);
  std::vector<const nn::Module*> parents;  // the module at each depth of the current path
  walk(plan, [&](const TreeNode& n, const LastFlags&) {
    if (parents.size() > static_cast<std::size_t>(n.depth)) parents.resize(n.depth);
    if (!n.repeat) {
      std::size_t id = node_id.size();
      node_id.emplace(n.module, id);
      std::string label = dot_escape(n.depth == 0 ? std::string("(root)") : *n.name) + "\\n" +
                          dot_escape(n.module->type_name());
      std::int64_t own = own_numel(*n.module);
      if (own > 0) label += "\\n" + human_count(own) + " params";
      std::string attrs = fmt::format("label=\"{}\"", label);
      if (ignored.count(n.module)) attrs += ", style=dashed, color=gray";
      std::string decl = fmt::format("n{} [{}];", id, attrs);
      if (n.unit >= 0)
        unit_nodes[n.unit].push_back(decl);
      else
        loose_nodes.push_back(decl);
    }
    if (n.depth > 0) {
      const nn::Module* parent = parents.back();
      edges.push_back(fmt::format("n{} -> n{}{};", node_id.at(parent), node_id.at(n.module),
                                  n.repeat ? " [style=dashed]" : ""));
    }
    parents.push_back(n.module);
  });
  std::vector<std::vector<std::size_t>> kids(plan.units.size());
  std::vector<std::size_t> tops;
  for (const auto& u : plan.units) (u.parent >= 0 ? kids[u.parent] : tops).push_back(u.index);
  std::string out = "digraph fsdp_plan {\n  node [shape=box, fontsize=10];\n";
  // Clusters nest as deep as the units (a 100 000-deep chain under `always`): an explicit stack,
  // and indentation drawn for at most kMaxDrawnDepth levels.
  auto indent = [](int depth) { return std::string(2 * std::min(depth, kMaxDrawnDepth), ' '); };
  auto open_cluster = [&](std::size_t k, int depth) {
    const std::string ind = indent(depth);
    const Unit& u = plan.units[k];
    out += fmt::format("{}subgraph cluster_unit{} {{\n", ind, k);
    out += fmt::format("{}  label=\"unit #{}: {} ({})\\n{} numel, {}/rank\";\n", ind, k,
                       dot_escape(unit_label(plan, u, kMaxLabelChars)), dot_escape(u.type),
                       human_count(u.numel), human_bytes(u.per_rank.params));
    out += fmt::format("{}  style=rounded; color=\"{}\";\n", ind,
                       u.mixed_precision || !plan.options.mixed_precision ? "blue" : "red");
    for (const auto& d : unit_nodes[k]) out += ind + "  " + d + "\n";
  };
  struct Open {
    std::size_t unit;
    int depth;
    std::size_t next_kid;
  };
  for (auto t : tops) {
    std::vector<Open> stack{{t, 1, 0}};
    open_cluster(t, 1);
    while (!stack.empty()) {
      Open& top = stack.back();
      if (top.next_kid == kids[top.unit].size()) {
        out += indent(top.depth) + "}\n";
        stack.pop_back();
        continue;
      }
      const std::size_t c = kids[top.unit][top.next_kid++];
      const int depth = top.depth + 1;
      open_cluster(c, depth);
      stack.push_back({c, depth, 0});
    }
  }
  for (const auto& d : loose_nodes) out += "  " + d + "\n";
  for (const auto& e : edges) out += "  " + e + "\n";
  out += "}\n";
  return out;
}

}  // namespace fsdp::plan
