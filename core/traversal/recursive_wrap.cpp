#include "core/traversal/recursive_wrap.h"

#include <optional>
#include <unordered_set>
#include <vector>

#include "core/error.h"
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

// Upstream's recursion, one explicit frame per active call, with `yielded` as named_children's
// memo; used when the model shares modules (the table does not describe it then).
struct Frame {
  nn::ModulePtr module;
  std::int64_t nonwrapped;  // numel counted when the module was entered
  std::int64_t total_wrapped = 0;
  std::size_t next_slot = 0;
  std::size_t pending_slot = 0;
  bool only_wrap_children;
  std::unordered_set<const nn::Module*> yielded;
};

RecursiveWrapResult literal_recursive_wrap(const nn::ModulePtr& module, const WrapDecision& policy,
                                           const WrapOne& wrap, const ModuleSet& ignored_modules,
                                           const ParamSet& ignored_params, bool only_wrap_children,
                                           const std::string* wrapper) {
  std::vector<Frame> stack;
  std::optional<RecursiveWrapResult> result;  // the value returned by the last finished call
  // One "call" of upstream's recursive function; returns its result unless it recursed.
  auto enter = [&](const nn::ModulePtr& m,
                   bool only_children) -> std::optional<RecursiveWrapResult> {
    check_subtree_not_wrapped(*m, ignored_modules, wrapper);
    const std::int64_t nonwrapped = subtree_numel(*m, ignored_params);
    if (!policy(*m, true, nonwrapped)) return RecursiveWrapResult{m, 0};
    Frame f{m, nonwrapped};
    f.only_wrap_children = only_children;
    stack.push_back(std::move(f));
    return std::nullopt;
  };

  result = enter(module, only_wrap_children);
  while (!stack.empty()) {
    Frame& top = stack.back();
    const auto& slots = top.module->child_slots();
    bool descended = false;
    while (top.next_slot < slots.size()) {
      std::size_t i = top.next_slot++;
      const nn::ModulePtr& child = slots[i].second;
      if (!child || !top.yielded.insert(child.get()).second) continue;
      if (contains(ignored_modules, child.get())) continue;
      top.pending_slot = i;
      nn::ModulePtr keep = child;  // `enter` may push a frame, invalidating `top`
      auto r = enter(keep, false);
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

// The same recursion over the table: children are entries index+1, then +size each; a slot is
// written only when its child was wrapped (setattr of the same child changes nothing).
RecursiveWrapResult table_recursive_wrap(const TreeTable& table, const nn::ModulePtr& root,
                                         const WrapDecision& policy, const WrapOne& wrap,
                                         const ModuleSet& ignored_modules, bool only_wrap_children,
                                         const std::string* wrapper) {
  if (wrapper)  // without shared modules only this first, whole-tree check can ever fail
    for (std::int32_t i : table.marked()) {
      nn::Module& m = *table[static_cast<std::size_t>(i)].module;
      if (!contains(ignored_modules, &m) && is_wrapper_of(m, wrapper))
        throw_already_wrapped(m, *wrapper);
    }
  struct TableFrame {
    std::int32_t index;
    std::int32_t next_child;
    std::int32_t end;
    bool only_wrap_children;
    std::int64_t total_wrapped;
  };
  std::vector<TableFrame> stack;
  constexpr std::size_t kModulesAhead = 8;
  nn::ModulePtr root_result;
  std::int64_t root_wrapped = 0;
  // Finishes entry `index` (its children done): returns the numel it reports to its parent, and
  // replaces it in its parent's slot when it is wrapped.
  auto finish = [&](const TableFrame& f) -> std::int64_t {
    const auto& e = table[static_cast<std::size_t>(f.index)];
    const std::int64_t remainder = e.numel - f.total_wrapped;
    if (f.only_wrap_children || !policy(*e.module, false, remainder)) {
      if (f.index == 0) root_result = root;
      return f.total_wrapped;
    }
    nn::ModulePtr wrapped = wrap(table.module_ptr(static_cast<std::size_t>(f.index), root));
    if (f.index == 0)
      root_result = std::move(wrapped);
    else
      set_child_slot(*table[static_cast<std::size_t>(e.parent)].module, e.slot, std::move(wrapped));
    return e.numel;
  };
  // Enters entry `index`; false when the policy does not recurse into it (it reports 0).
  auto enter = [&](std::int32_t index, bool only_children) {
    const auto& e = table[static_cast<std::size_t>(index)];
    // Entries are entered in increasing order: fetch a module the policy will soon look at.
    if (static_cast<std::size_t>(index) + kModulesAhead < table.size())
      __builtin_prefetch(table[static_cast<std::size_t>(index) + kModulesAhead].module);
    if (!policy(*e.module, true, e.numel)) return false;
    stack.push_back({index, index + 1, index + e.size, only_children, 0});
    return true;
  };

  if (!enter(0, only_wrap_children)) return {root, 0};
  while (true) {
    TableFrame& top = stack.back();
    if (top.next_child < top.end) {
      const std::int32_t child = top.next_child;
      top.next_child += table[static_cast<std::size_t>(child)].size;
      if (contains(ignored_modules, table[static_cast<std::size_t>(child)].module)) continue;
      enter(child, false);  // not recursed into: reports 0, slot unchanged
      continue;
    }
    const TableFrame done = top;
    stack.pop_back();
    const std::int64_t reported = finish(done);
    if (stack.empty()) {
      root_wrapped = reported;
      break;
    }
    stack.back().total_wrapped += reported;
  }
  return {root_result, root_wrapped};
}

}  // namespace

RecursiveWrapResult recursive_wrap(const nn::ModulePtr& module, const WrapDecision& policy,
                                   const WrapOne& wrap, const ModuleSet& ignored_modules,
                                   const ParamSet& ignored_params, bool only_wrap_children,
                                   const std::string* wrapper, const TreeTable* table) {
  if (!policy) throw AssertionError("Must specify auto_wrap_policy.");
  if (!wrap) throw AssertionError("Must specify wrapper_cls");
  std::optional<TreeTable> own;
  if (!table) table = &own.emplace(*module, ignored_params);
  if (table->is_tree())
    return table_recursive_wrap(*table, module, policy, wrap, ignored_modules, only_wrap_children,
                                wrapper);
  return literal_recursive_wrap(module, policy, wrap, ignored_modules, ignored_params,
                                only_wrap_children, wrapper);
}

}  // namespace fsdp::traversal
