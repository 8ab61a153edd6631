#include "tools/plan/format.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <string_view>
#include <unordered_set>

namespace fsdp::plan {

std::string human_bytes(std::int64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  int digits = v >= 100 ? 0 : v >= 10 ? 1 : 2;
  return fmt::format("{:.{}f} {}", v, digits, units[u]);
}

std::string human_count(std::int64_t n) {
  static const char* units[] = {"", "K", "M", "B", "T"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  if (u == 0) return std::to_string(n);
  return fmt::format("{:.{}f}{}", v, v >= 100 ? 0 : 1, units[u]);
}

namespace {

struct TreeNode {
  const nn::Module* module;
  const std::string* name;  // slot name (nullptr for the root)
  int depth;
  int unit;               // nearest enclosing unit (the module's own, if it is one), -1 if none
  int own_unit;           // the unit the module is (not for a repeat), -1 if none
  bool repeat;            // a module already shown under another path (shared module)
  bool last;              // last child of its parent (tree drawing)
  std::string repeat_of;  // the FQN where a repeated module was first shown
};

// Whether the ancestor at each depth (1..depth of the node) is the last child of its parent: the
// table draws its tree lines from these.
using LastFlags = std::vector<char>;

// Pre-order over the module tree, each module expanded once (later slots holding the same
// object are reported as repeats), carrying the nearest enclosing unit. It follows the plan's
// pre-order table: memory is linear in the number of modules whatever the depth, and paths are
// spelled out only for repeats.
template <typename Fn>
void walk(const Plan& plan, Fn&& fn) {
  struct Item {
    const nn::Module* m;
    std::int64_t parent;  // pre-order index
    const std::string* name;
    int depth, unit;
    bool last;
  };
  LastFlags last_flags;
  std::vector<Item> stack{{plan.root.get(), -1, nullptr, 0, -1, true}};
  while (!stack.empty()) {
    Item it = stack.back();
    stack.pop_back();
    const std::int64_t index = plan.module_index.find(it.m);
    const PathNode& first = plan.paths[static_cast<std::size_t>(index)];
    // The planner's pre-order walk reached each module first through the same slot.
    const bool repeat = first.parent != it.parent || first.name != it.name;
    const int own_unit = repeat ? -1 : plan.unit_at[static_cast<std::size_t>(index)];
    const int unit = own_unit >= 0 ? own_unit : it.unit;
    TreeNode node{it.m, it.name, it.depth, unit, own_unit, repeat, it.last, ""};
    if (repeat) node.repeat_of = plan.path_str(static_cast<std::size_t>(index));
    last_flags.resize(static_cast<std::size_t>(it.depth));
    last_flags.push_back(it.last ? 1 : 0);
    fn(node, last_flags);
    if (repeat) continue;
    const auto& slots = it.m->child_slots();
    std::size_t n = 0;
    for (const auto& slot : slots) n += slot.second ? 1 : 0;
    std::size_t k = n;
    for (auto s = slots.rbegin(); s != slots.rend(); ++s) {
      if (!s->second) continue;
      stack.push_back({s->second.get(), index, &s->first, it.depth + 1, unit, k == n});
      --k;
    }
  }
}

// Tree lines are drawn for this many levels; deeper lines say their depth instead, so that the
// table of a 100 000-deep chain stays linear in the number of modules.
constexpr int kMaxDrawnDepth = 48;
// Unit FQNs in dot labels are cut to their last characters beyond this length.
constexpr std::size_t kMaxLabelChars = 80;

std::int64_t own_numel(const nn::Module& m) {
  std::int64_t n = 0;
  for (const auto& [name, p] : m.parameter_slots())
    if (p.defined()) n += p.numel();
  return n;
}

// A unit's FQN, or "(root)"; one longer than `max_chars` is cut to an ellipsis and its last
// max_chars - 1 characters (so that a 100 000-deep chain's labels stay short).
std::string unit_label(const Plan& plan, const Unit& u, std::size_t max_chars = std::string::npos) {
  bool cut = false;
  std::string f = plan.path_str(u.path, max_chars, &cut);
  if (cut) return "…" + f.substr(1);
  return f.empty() ? "(root)" : f;
}

}  // namespace

std::string format_table(const Plan& plan) {
  const auto& o = plan.options;
  std::string out;
  out += fmt::format("policy: {}   sharding: {} over {} rank{}{}   mixed precision: {}{}\n",
                     plan.policy_str, strategy_name(plan.sharding), o.world_size,
                     o.world_size == 1 ? "" : "s",
                     plan.shard_group_size != o.world_size
                         ? fmt::format(" (shards over {} per node)", plan.shard_group_size)
                         : "",
                     o.mixed_precision ? std::string(dtype_name(o.mp_dtype)) : "off",
                     o.use_orig_params ? "   use_orig_params" : "");
  out += fmt::format(
      "model: {} modules, {} parameters ({}){}\n\n", plan.num_modules,
      human_count(plan.model_numel), human_bytes(plan.model_param_bytes),
      plan.ignored_numel ? fmt::format(", {} ignored", human_count(plan.ignored_numel)) : "");
  std::unordered_set<const nn::Module*> ignored;
  for (const auto& path : o.ignore)
    for (auto& m : plan.root->get_submodule(path)->modules()) ignored.insert(m.get());
  out += "module tree ([#k] = FSDP unit k, construction order; sizes are what the unit flattens)\n";
  auto to = std::back_inserter(out);
  walk(plan, [&](const TreeNode& n, const LastFlags& last) {
    for (int d = 1; d < n.depth && d <= kMaxDrawnDepth; ++d) out += last[d] ? "   " : "│  ";
    if (n.depth > kMaxDrawnDepth) fmt::format_to(to, "┄ [depth {}] ", n.depth);
    if (n.depth > 0) out += n.last ? "└─ " : "├─ ";
    const bool is_unit = n.own_unit >= 0;
    if (is_unit) fmt::format_to(to, "[#{}] ", n.own_unit);
    out += n.depth == 0 ? std::string_view("(root)") : std::string_view(*n.name);
    fmt::format_to(to, " ({})", n.module->type_name());
    if (n.repeat) {
      out += " = same module as ";
      out += n.repeat_of.empty() ? "(root)" : n.repeat_of;
    } else {
      std::int64_t own = own_numel(*n.module);
      if (own > 0) fmt::format_to(to, "  {} params", human_count(own));
      if (!ignored.empty() && ignored.count(n.module)) out += "  [ignored]";
      if (is_unit) {
        const Unit& un = plan.units[static_cast<std::size_t>(n.own_unit)];
        fmt::format_to(to, "  => unit #{}: {} flattened, {}/rank{}", un.index,
                       human_count(un.numel), human_bytes(un.per_rank.params),
                       un.mixed_precision || !o.mixed_precision ? "" : ", full precision");
      }
    }
    out += '\n';
  });

  out += "\nunits (construction order; per-rank bytes for one rank)\n";
  out += fmt::format("{:>4}  {:<28} {:<22} {:>6} {:>9} {:>9} {:>7} {:>10} {:>10} {:>10} {:>10}\n",
                     "#", "fqn", "type", "params", "numel", "shard", "pad", "params/rk", "grads/rk",
                     "optim/rk", "allgather");
  for (const auto& u : plan.units) {
    std::string f = unit_label(plan, u, 28);
    std::string t = u.type.size() > 22 ? u.type.substr(0, 21) + "…" : u.type;
    out += fmt::format("{:>4}  {:<28} {:<22} {:>6} {:>9} {:>9} {:>7} {:>10} {:>10} {:>10} {:>10}\n",
                       u.index, f, t, u.params.size(), human_count(u.numel),
                       human_count(u.shard_numel), u.padding, human_bytes(u.per_rank.params),
                       human_bytes(u.per_rank.grads), human_bytes(u.per_rank.optimizer),
                       human_bytes(u.all_gather_bytes));
  }
  const auto& t = plan.totals;
  out += plan.activations ? "\nper rank (Adam, fp32 states)\n"
                          : "\nper rank (Adam, fp32 states; activations not included)\n";
  auto row = [&](const std::string& k, std::int64_t v) {
    out += fmt::format("  {:<48} {:>12}\n", k, human_bytes(v));
  };
  row("parameters (sharded)", t.per_rank.params);
  row("gradients (sharded)", t.per_rank.grads);
  row("optimizer state", t.per_rank.optimizer);
  row("peak unsharded parameters (all-gathered)", t.peak_unsharded_param_bytes);
  row("peak unsharded gradient (before reduce-scatter)", t.peak_unsharded_grad_bytes);
  row("peak total", t.peak_bytes);
  if (const auto& a = plan.activations) {
    row(fmt::format("activations (estimate, batch {} x seq {})", a->batch, a->seq),
        t.activation_bytes);
    for (const auto& [type, bytes] : a->by_type) row("  " + type, bytes);
    row("peak total incl. activations", t.peak_with_activations_bytes);
    for (const auto& line : a->assumed) out += "  assumed: " + line + "\n";
    if (!a->not_estimated.empty()) {
      out += "  own forward not estimated (their children are):";
      for (std::size_t i = 0; i < a->not_estimated.size(); ++i) {
        if (i == 8) {
          out += fmt::format(" and {} more", a->not_estimated.size() - 8);
          break;
        }
        out += (i ? ", " : " ") + a->not_estimated[i];
      }
      out += "\n";
    }
  }
  out += "per step, per rank (collective buffer sizes)\n";
  row("all-gather", t.all_gather_bytes);
  row("reduce-scatter", t.reduce_scatter_bytes);
  row("all-reduce", t.all_reduce_bytes);
  return out;
}

namespace {

// A small streaming JSON writer: a million-unit plan is written without building a DOM.
class JsonOut {
 public:
  // With a sink, the text goes to it in blocks of about kBlock bytes as it is made.
  explicit JsonOut(std::FILE* sink = nullptr) : sink_(sink) {}
  std::string str() { return std::move(out_); }
  // Writes what is buffered to the sink; false once a write has failed.
  bool flush() {
    if (sink_ && !out_.empty() && ok_)
      ok_ = std::fwrite(out_.data(), 1, out_.size(), sink_) == out_.size();
    out_.clear();
    return ok_;
  }
  void open(char c) {
    comma();
    out_ += c;
    first_ = true;
    ++depth_;
  }
  void close(char c) {
    --depth_;
    if (!first_) newline();
    out_ += c;
    first_ = false;
    if (sink_ && out_.size() >= kBlock) flush();
  }
  void key(std::string_view k) {
    comma();
    string(k);
    out_ += ": ";
    pending_key_ = true;
  }
  void value(std::string_view v) {
    comma();
    string(v);
  }
  void value(const std::string& v) { value(std::string_view(v)); }
  void value(const char* v) { value(std::string_view(v)); }
  void value(std::int64_t v) {
    comma();
    char buf[24];
    out_.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
  }
  void value(std::size_t v) { value(static_cast<std::int64_t>(v)); }
  void value(int v) { value(static_cast<std::int64_t>(v)); }
  void value(bool v) {
    comma();
    out_ += v ? "true" : "false";
  }
  void raw(const char* text) { out_ += text; }
  void null() {
    comma();
    out_ += "null";
  }
  template <typename T>
  void field(std::string_view k, const T& v) {
    key(k);
    value(v);
  }
  // An inline list whose items come one by one: begin_list(key), item(s)..., end_list().
  void begin_list(std::string_view k) {
    key(k);
    comma();
    out_ += '[';
    list_first_ = true;
  }
  void item(const std::string& s) {
    if (!list_first_) out_ += ", ";
    list_first_ = false;
    string(s);
    if (sink_ && out_.size() >= kBlock) flush();
  }
  void end_list() { out_ += ']'; }
  void strings(std::string_view k, const std::vector<std::string>& v, bool inline_list) {
    key(k);
    if (inline_list) {
      comma();
      out_ += '[';
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (i) out_ += ", ";
        string(v[i]);
      }
      out_ += ']';
      return;
    }
    open('[');
    for (const auto& s : v) value(s);
    close(']');
  }

 private:
  void newline() {
    out_ += '\n';
    out_.append(static_cast<std::size_t>(depth_), ' ');
  }
  void comma() {
    if (pending_key_) {
      pending_key_ = false;
      return;
    }
    if (!first_) out_ += ',';
    if (depth_ > 0) newline();
    first_ = false;
  }
  void string(std::string_view s) {
    out_ += '"';
    // Runs of plain characters are appended whole (FQNs run to gigabytes on deep chains).
    const char* run = s.data();
    const char* end = s.data() + s.size();
    for (const char* c = run; c != end; ++c) {
      const auto u = static_cast<unsigned char>(*c);
      if (u >= 0x20 && u != '"' && u != '\\') continue;
      out_.append(run, c);
      switch (*c) {
        case '"':
          out_ += "\\\"";
          break;
        case '\\':
          out_ += "\\\\";
          break;
        case '\n':
          out_ += "\\n";
          break;
        case '\t':
          out_ += "\\t";
          break;
        case '\r':
          out_ += "\\r";
          break;
        default:
          out_ += fmt::format("\\u{:04x}", static_cast<int>(u));
      }
      run = c + 1;
    }
    out_.append(run, end);
    out_ += '"';
  }
  static constexpr std::size_t kBlock = 1 << 20;
  std::FILE* sink_;
  bool ok_ = true;
  std::string out_;
  bool first_ = true;
  bool pending_key_ = false;
  bool list_first_ = true;
  int depth_ = 0;
};

void memory_fields(JsonOut& j, const RankMemory& m) {
  j.field("params_bytes", m.params);
  j.field("grads_bytes", m.grads);
  j.field("optimizer_bytes", m.optimizer);
  j.field("total_bytes", m.total());
}

}  // namespace

namespace {

void json_into(const Plan& plan, JsonOut& j) {
  const auto& o = plan.options;
  j.open('{');
  j.field("format", "fsdp-plan/1");
  j.key("config");
  j.open('{');
  j.field("policy", plan.policy_str);
  j.field("world_size", o.world_size);
  j.field("sharding", strategy_name(o.sharding));
  j.field("effective_sharding", strategy_name(plan.sharding));
  j.field("shard_group_size", plan.shard_group_size);
  j.field("mixed_precision", o.mixed_precision);
  j.field("param_dtype", o.mixed_precision ? std::string(dtype_name(o.mp_dtype)) : "");
  j.field("use_orig_params", o.use_orig_params);
  j.strings("ignored_modules", o.ignore, true);
  j.field("optimizer", "Adam");
  j.close('}');
  j.key("model");
  j.open('{');
  j.field("root_type", plan.root->type_name());
  j.field("modules", plan.num_modules);
  j.field("numel", plan.model_numel);
  j.field("param_bytes", plan.model_param_bytes);
  j.field("ignored_numel", plan.ignored_numel);
  j.close('}');
  j.key("units");
  j.open('[');
  for (const auto& u : plan.units) {
    j.open('{');
    j.field("index", u.index);
    j.field("fqn", plan.unit_fqn(u));
    j.field("type", u.type);
    j.key("parent");
    if (u.parent < 0)
      j.null();
    else
      j.value(u.parent);
    j.begin_list("params");
    for (const auto& p : u.params) j.item(plan.param_fqn(p));
    j.end_list();
    j.field("numel", u.numel);
    j.field("trainable_numel", u.trainable_numel);
    j.key("bytes_per_dtype");
    j.open('{');
    for (const auto& [d, b] : u.bytes_per_dtype) j.field(std::string(dtype_name(d)), b);
    j.close('}');
    j.field("sharding", strategy_name(u.sharding));
    j.field("mixed_precision", u.mixed_precision);
    j.field("flat_numel", u.flat_numel);
    j.field("shard_numel", u.shard_numel);
    j.field("padded_numel", u.padded_numel);
    j.field("padding", u.padding);
    j.key("per_rank");
    j.open('{');
    memory_fields(j, u.per_rank);
    j.close('}');
    j.field("unsharded_bytes", u.unsharded_bytes);
    j.field("unsharded_grad_bytes", u.unsharded_grad_bytes);
    j.field("all_gathers_per_step", u.all_gathers_per_step);
    j.field("all_gather_bytes", u.all_gather_bytes);
    j.field("reduce_scatter_bytes", u.reduce_scatter_bytes);
    j.field("all_reduce_bytes", u.all_reduce_bytes);
    j.close('}');
  }
  j.close(']');
  const auto& t = plan.totals;
  j.key("per_rank");
  j.open('{');
  memory_fields(j, t.per_rank);
  j.field("peak_unsharded_param_bytes", t.peak_unsharded_param_bytes);
  j.field("peak_unsharded_grad_bytes", t.peak_unsharded_grad_bytes);
  j.field("peak_bytes", t.peak_bytes);
  if (const auto& a = plan.activations) {
    j.field("activation_bytes", t.activation_bytes);
    j.field("peak_with_activations_bytes", t.peak_with_activations_bytes);
    j.key("activations");
    j.open('{');
    j.field("batch", a->batch);
    j.field("seq", a->seq);
    j.key("by_type");
    j.open('{');
    for (const auto& [type, bytes] : a->by_type) j.field(type, bytes);
    j.close('}');
    j.strings("assumed", a->assumed, false);
    j.strings("not_estimated", a->not_estimated, false);
    j.close('}');
  }
  j.close('}');
  j.key("per_step");
  j.open('{');
  j.field("all_gather_bytes", t.all_gather_bytes);
  j.field("reduce_scatter_bytes", t.reduce_scatter_bytes);
  j.field("all_reduce_bytes", t.all_reduce_bytes);
  j.close('}');
  j.strings("warnings", plan.warnings, false);
  j.close('}');
  j.raw("\n");
}

}  // namespace

std::string format_json(const Plan& plan) {
  JsonOut j;
  json_into(plan, j);
  return j.str();
}

bool write_json(const Plan& plan, std::FILE* out) {
  JsonOut j(out);
  json_into(plan, j);
  return j.flush();
}

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
  std::unordered_set<const nn::Module*> ignored;
  for (const auto& path : plan.options.ignore)
    for (auto& m : plan.root->get_submodule(path)->modules()) ignored.insert(m.get());
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
