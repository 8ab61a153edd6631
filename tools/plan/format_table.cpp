// The plan as a terminal table: the module tree with units marked, then per-rank totals.
#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <unordered_set>

#include "policies/sharding_strategy_names.h"
#include "tools/plan/format.h"
#include "tools/plan/format_tree.h"

namespace fsdp::plan {

using namespace format_detail;

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

std::string format_table(const Plan& plan) {
  const auto& o = plan.options;
  std::string out;
  out += fmt::format("policy: {}   sharding: {} over {} rank{}{}   mixed precision: {}{}\n",
                     plan.policy_str, policies::strategy_name(plan.sharding), o.world_size,
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
  const auto ignored = ignored_modules(plan);
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

}  // namespace fsdp::plan
