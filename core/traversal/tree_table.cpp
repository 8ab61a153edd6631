#include "core/traversal/tree_table.h"

#include <limits>
#include <unordered_map>

#include "core/error.h"
#include "core/fqn.h"
#include "core/traversal/pointer_set.h"

namespace fsdp::traversal {

namespace {

// Buffers kept between tables on one thread: a table over 50 000 modules needs a few MB, and
// fresh allocations of that size are fresh pages from the kernel every time. A table built while
// another is being built on the same thread (a policy that auto-wraps) allocates its own.
struct Pending {
  nn::Module* module;
  std::int32_t parent;
  std::uint32_t slot;
  bool may_repeat;  // held by more than one owner, so possibly by two slots of the tree
};
struct Scratch {
  PointerSet modules{1024};
  PointerSet params{1024};
  std::vector<Pending> stack;
};
thread_local std::unique_ptr<Scratch> t_scratch;
thread_local std::vector<TreeTable::Entry> t_entries;

// Calls fn(param) for each counted parameter of m: defined, not ignored, once per module
// (named_parameters de-duplicates within a module), and whether it has other owners.
template <typename Fn>
void for_each_param(const nn::Module& m, const ParamSet& ignored_params, Fn&& fn) {
  const auto& params = m.parameter_slots();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i].second;
    if (!p.defined() || contains(ignored_params, p)) continue;
    bool repeat = false;
    for (std::size_t j = 0; j < i && !repeat; ++j) repeat = params[j].second.impl() == p.impl();
    if (!repeat) fn(*p.impl(), p.impl_ptr().use_count() > 1);
  }
}

}  // namespace

TreeTable::TreeTable(nn::Module& root, const ParamSet& ignored_params) {
  std::unique_ptr<Scratch> scratch = t_scratch ? std::move(t_scratch) : std::make_unique<Scratch>();
  entries_.swap(t_entries);
  auto& seen = scratch->modules;
  auto& params_seen = scratch->params;
  auto& stack = scratch->stack;
  // Parameters held by more than one module -> (numel, holders); models without tied weights
  // never touch the map.
  std::unordered_map<const TensorImpl*, std::pair<std::int64_t, std::vector<std::int32_t>>> shared;

  // Pass 1, the modules in pre-order. An object with a single owner (its slot) cannot be
  // reached twice, so only objects with more owners go into the identity set: in a model without
  // shared modules, few do.
  stack.push_back({&root, -1, 0, true});
  while (!stack.empty()) {
    const Pending p = stack.back();
    stack.pop_back();
    nn::Module& m = *p.module;
    // On models larger than the cache the walk waits on memory: start loading the child arrays
    // of the next modules on the stack (their objects came in when they were pushed).
    for (std::size_t k = 1; k <= 2 && k <= stack.size(); ++k)
      __builtin_prefetch(stack[stack.size() - k].module->child_slots().data());
    if (p.may_repeat && !seen.insert(&m)) {
      is_tree_ = false;
      break;
    }
    FSDP_CHECK(entries_.size() < static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()),
               ValueError, "module tree too large to index ({} modules)", entries_.size());
    const auto index = static_cast<std::int32_t>(entries_.size());
    if (m.wrapper_mark()) marked_.push_back(index);
    entries_.push_back({&m, 0, p.parent, 1, p.slot});
    const auto& slots = m.child_slots();
    for (std::size_t i = slots.size(); i-- > 0;) {
      const nn::ModulePtr& child = slots[i].second;
      if (!child) continue;
      // The count lives in the control block, which make_shared puts just before the module.
      stack.push_back({child.get(), index, static_cast<std::uint32_t>(i), child.use_count() > 1});
    }
  }
  // Pass 2, each module's own parameter numel, over the table in order, as a pipeline: the
  // module objects (the part pass 1 did not read), then their parameter arrays, then their
  // tensors are fetched a few entries ahead of the one being summed.
  constexpr std::size_t kModulesAhead = 24, kArraysAhead = 16, kTensorsAhead = 8;
  const std::size_t n = is_tree_ ? entries_.size() : 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i + kModulesAhead < n)
      __builtin_prefetch(&entries_[i + kModulesAhead].module->parameter_slots());
    if (i + kArraysAhead < n)
      __builtin_prefetch(entries_[i + kArraysAhead].module->parameter_slots().data());
    if (i + kTensorsAhead < n)
      for (const auto& slot : entries_[i + kTensorsAhead].module->parameter_slots())
        if (const TensorImpl* t = slot.second.impl())  // a None parameter has no object
          __builtin_prefetch(reinterpret_cast<const char*>(t) - 8);
    std::int64_t own = 0;
    for_each_param(*entries_[i].module, ignored_params, [&](const TensorImpl& t, bool may_repeat) {
      own += t.numel();
      if (may_repeat && !params_seen.insert(&t))
        shared.try_emplace(&t, t.numel(), std::vector<std::int32_t>{});
    });
    entries_[i].numel = own;
  }
  stack.clear();
  seen.clear();
  params_seen.clear();
  t_scratch = std::move(scratch);
  if (!is_tree_) {
    entries_.clear();
    marked_.clear();
    return;
  }
  if (!shared.empty())
    for (std::size_t i = 0; i < entries_.size(); ++i)
      for_each_param(*entries_[i].module, ignored_params, [&](const TensorImpl& t, bool) {
        auto it = shared.find(&t);
        if (it != shared.end()) it->second.second.push_back(static_cast<std::int32_t>(i));
      });
  for (std::size_t i = entries_.size(); i-- > 1;) {
    auto& e = entries_[i];
    auto& parent = entries_[static_cast<std::size_t>(e.parent)];
    parent.size += e.size;
    parent.numel += e.numel;
  }
  // A parameter held by k modules of one subtree was added k times there; count it once.
  for (const auto& [impl, entry] : shared) {
    const auto& [numel, holders] = entry;
    std::unordered_map<std::int32_t, std::int64_t> count;
    for (std::int32_t h : holders)
      for (std::int32_t j = h; j != -1; j = entries_[static_cast<std::size_t>(j)].parent)
        ++count[j];
    for (const auto& [j, c] : count)
      if (c > 1) entries_[static_cast<std::size_t>(j)].numel -= (c - 1) * numel;
  }
}

TreeTable::~TreeTable() {
  if (entries_.capacity() > t_entries.capacity()) {
    entries_.clear();
    t_entries.swap(entries_);
  }
}

std::string TreeTable::name(std::size_t i) const {
  std::vector<const std::string*> parts;
  for (auto e = static_cast<std::int32_t>(i); entries_[static_cast<std::size_t>(e)].parent != -1;
       e = entries_[static_cast<std::size_t>(e)].parent) {
    const Entry& entry = entries_[static_cast<std::size_t>(e)];
    parts.push_back(
        &entries_[static_cast<std::size_t>(entry.parent)].module->child_slots()[entry.slot].first);
  }
  return join_fqn_leaf_first(parts);
}

const nn::ModulePtr& TreeTable::module_ptr(std::size_t i, const nn::ModulePtr& root) const {
  const Entry& e = entries_[i];
  if (e.parent < 0) return root;
  return entries_[static_cast<std::size_t>(e.parent)].module->child_slots()[e.slot].second;
}

}  // namespace fsdp::traversal
