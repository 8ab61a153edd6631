#include "core/traversal/recursive_wrap.h"

#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/error.h"
#include "core/traversal/pointer_set.h"
#include "core/traversal/post_order.h"
#include "core/traversal/wrapper_marker.h"

namespace fsdp::traversal {

namespace {

void throw_already_wrapped(const nn::Module& child, const std::string& wrapper) {
  throw AssertionError(
      fmt::format("Child module {} is already wrapped by {}", child.repr(), wrapper));
}

bool is_wrapper_of(const nn::Module& m, const std::string* wrapper) {
  const std::string* cls = wrapper_class(m);
  return cls && *cls == *wrapper;
}

// Upstream's per-call check: named_modules() of `m` (itself included), ignored ones skipped.
void check_subtree_not_wrapped(nn::Module& m, const ModuleSet& ignored,
                               const std::string* wrapper) {
  if (!wrapper) return;
  for (const auto& [name, child] : m.named_modules())
    if (!contains(ignored, child.get()) && is_wrapper_of(*child, wrapper))
      throw_already_wrapped(*child, *wrapper);
}

// Upstream's per-call count: sum(p.numel() for p in m.parameters() if p not in ignored_params).
std::int64_t subtree_numel(nn::Module& m, const ParamSet& ignored_params) {
  std::int64_t n = 0;
  for (const auto& p : m.parameters())
    if (!contains(ignored_params, p)) n += p.numel();
  return n;
}

// The tree below the root in pre-order, with bottom-up numels; `ok` is false when some module
// is reachable twice (then the literal engine runs instead).
struct SubtreeTable {
  bool ok = true;
  std::vector<nn::Module*> order;    // pre-order
  std::vector<std::int64_t> parent;  // pre-order index of the parent, -1 for the root
  std::vector<std::int64_t> size;    // modules in the subtree
  std::vector<std::int64_t> numel;   // unique non-ignored parameter numel in the subtree
};

SubtreeTable build_table(nn::Module& root, const ParamSet& ignored_params) {
  SubtreeTable t;
  PointerSet seen;
  std::vector<std::pair<nn::Module*, std::int64_t>> stack{{&root, -1}};
  // Parameters held by more than one module -> (numel, holders); found with a flat set so
  // that models without tied weights pay no map.
  PointerSet params_seen;
  std::unordered_map<const TensorImpl*, std::pair<std::int64_t, std::vector<std::int64_t>>> shared;
  // Calls fn(param) for each counted parameter of m: defined, not ignored, once per module
  // (named_parameters de-duplicates within a module).
  auto for_each_param = [&](const nn::Module& m, auto&& fn) {
    const auto& params = m.parameter_slots();
    for (std::size_t i = 0; i < params.size(); ++i) {
      const Tensor& p = params[i].second;
      if (!p.defined() || contains(ignored_params, p)) continue;
      bool repeat = false;
      for (std::size_t j = 0; j < i && !repeat; ++j) repeat = params[j].second.impl() == p.impl();
      if (!repeat) fn(p);
    }
  };
  while (!stack.empty()) {
    auto [m, parent] = stack.back();
    stack.pop_back();
    if (!seen.insert(m)) {
      t.ok = false;
      return t;
    }
    auto idx = static_cast<std::int64_t>(t.order.size());
    t.order.push_back(m);
    t.parent.push_back(parent);
    std::int64_t own = 0;
    for_each_param(*m, [&](const Tensor& p) {
      own += p.numel();
      if (!params_seen.insert(p.impl()))
        shared.try_emplace(p.impl(), p.numel(), std::vector<std::int64_t>{});
    });
    t.numel.push_back(own);
    const auto& slots = m->child_slots();
    for (auto it = slots.rbegin(); it != slots.rend(); ++it)
      if (it->second) stack.emplace_back(it->second.get(), idx);
  }
  if (!shared.empty())
    for (std::size_t i = 0; i < t.order.size(); ++i)
      for_each_param(*t.order[i], [&](const Tensor& p) {
        auto it = shared.find(p.impl());
        if (it != shared.end()) it->second.second.push_back(static_cast<std::int64_t>(i));
      });
  const std::size_t n = t.order.size();
  t.size.assign(n, 1);
  for (std::size_t i = n; i-- > 1;) {
    auto p = static_cast<std::size_t>(t.parent[i]);
    t.size[p] += t.size[i];
    t.numel[p] += t.numel[i];
  }
  // A parameter held by k modules of one subtree was added k times there; count it once.
  for (const auto& [impl, entry] : shared) {
    const auto& [numel, holders] = entry;
    std::unordered_map<std::int64_t, std::int64_t> count;
    for (std::int64_t h : holders)
      for (std::int64_t j = h; j != -1; j = t.parent[static_cast<std::size_t>(j)]) ++count[j];
    for (const auto& [j, c] : count)
      if (c > 1) t.numel[static_cast<std::size_t>(j)] -= (c - 1) * numel;
  }
  return t;
}

struct Frame {
  nn::ModulePtr module;
  std::int64_t index;       // pre-order index (fast engine)
  std::int64_t nonwrapped;  // numel counted when the module was entered
  std::int64_t total_wrapped = 0;
  std::size_t next_slot = 0;
  std::int64_t next_index;  // pre-order index of the next child (fast engine)
  std::size_t pending_slot = 0;
  bool only_wrap_children;
  std::unordered_set<const nn::Module*> yielded;  // named_children's memo (literal engine)
};

}  // namespace

RecursiveWrapResult recursive_wrap(const nn::ModulePtr& module, const WrapDecision& policy,
                                   const WrapOne& wrap, const ModuleSet& ignored_modules,
                                   const ParamSet& ignored_params, bool only_wrap_children,
                                   const std::string* wrapper) {
  if (!policy) throw AssertionError("Must specify auto_wrap_policy.");
  if (!wrap) throw AssertionError("Must specify wrapper_cls");
  SubtreeTable table = build_table(*module, ignored_params);
  const bool fast = table.ok;
  if (fast && wrapper) {
    // Without shared modules no wrapper created here can appear inside a subtree entered later,
    // so upstream's per-call check can only ever fail on this first, whole-tree pass.
    for (nn::Module* m : table.order)
      if (!contains(ignored_modules, m) && is_wrapper_of(*m, wrapper))
        throw_already_wrapped(*m, *wrapper);
  }

  std::vector<Frame> stack;
  std::optional<RecursiveWrapResult> result;  // the value returned by the last finished call
  // One "call" of upstream's recursive function; returns its result unless it recursed.
  auto enter = [&](const nn::ModulePtr& m, std::int64_t index,
                   bool only_children) -> std::optional<RecursiveWrapResult> {
    std::int64_t nonwrapped;
    if (fast) {
      nonwrapped = table.numel[static_cast<std::size_t>(index)];
    } else {
      check_subtree_not_wrapped(*m, ignored_modules, wrapper);
      nonwrapped = subtree_numel(*m, ignored_params);
    }
    if (!policy(*m, true, nonwrapped)) return RecursiveWrapResult{m, 0};
    Frame f{m, index, nonwrapped};
    f.next_index = index + 1;
    f.only_wrap_children = only_children;
    stack.push_back(std::move(f));
    return std::nullopt;
  };

  result = enter(module, 0, only_wrap_children);
  while (!stack.empty()) {
    Frame& top = stack.back();
    const auto& slots = top.module->child_slots();
    bool descended = false;
    while (top.next_slot < slots.size()) {
      std::size_t i = top.next_slot++;
      const nn::ModulePtr& child = slots[i].second;
      if (!child) continue;
      std::int64_t child_index = -1;
      if (fast) {
        child_index = top.next_index;
        top.next_index += table.size[static_cast<std::size_t>(child_index)];
      } else if (!top.yielded.insert(child.get()).second) {
        continue;
      }
      if (contains(ignored_modules, child.get())) continue;
      top.pending_slot = i;
      nn::ModulePtr keep = child;  // `enter` may push a frame, invalidating `top`
      auto r = enter(keep, child_index, false);
      if (!r) {
        descended = true;
        break;
      }
      Frame& parent = stack.back();
      set_child_slot(*parent.module, i, r->module);
      parent.total_wrapped += r->wrapped_numel;
    }
    if (descended) continue;
    Frame done = std::move(stack.back());
    stack.pop_back();
    std::int64_t remainder = done.nonwrapped - done.total_wrapped;
    if (!done.only_wrap_children && policy(*done.module, false, remainder))
      result = RecursiveWrapResult{wrap(done.module), done.nonwrapped};  // leaf or final remainder
    else
      result = RecursiveWrapResult{done.module, done.total_wrapped};
    if (!stack.empty()) {
      Frame& parent = stack.back();
      set_child_slot(*parent.module, parent.pending_slot, result->module);
      parent.total_wrapped += result->wrapped_numel;
    }
  }
  return *result;
}

}  // namespace fsdp::traversal
