// Internal to the plan formats: the module tree walk that the table and the DOT graph draw
// from, and the labels they share.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "tools/plan/planner.h"

namespace fsdp::plan::format_detail {

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

inline std::int64_t own_numel(const nn::Module& m) {
  std::int64_t n = 0;
  for (const auto& [name, p] : m.parameter_slots())
    if (p.defined()) n += p.numel();
  return n;
}

// A unit's FQN, or "(root)"; one longer than `max_chars` is cut to an ellipsis and its last
// max_chars - 1 characters (so that a 100 000-deep chain's labels stay short).
inline std::string unit_label(const Plan& plan, const Unit& u,
                              std::size_t max_chars = std::string::npos) {
  bool cut = false;
  std::string f = plan.path_str(u.path, max_chars, &cut);
  if (cut) return "…" + f.substr(1);
  return f.empty() ? "(root)" : f;
}

// The modules the plan's options ignore (each ignored path's whole subtree).
inline std::unordered_set<const nn::Module*> ignored_modules(const Plan& plan) {
  std::unordered_set<const nn::Module*> ignored;
  for (const auto& path : plan.options.ignore)
    for (auto& m : plan.root->get_submodule(path)->modules()) ignored.insert(m.get());
  return ignored;
}

}  // namespace fsdp::plan::format_detail
