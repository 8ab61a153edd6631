#include "core/traversal/post_order.h"

#include "core/error.h"
#include "core/fqn.h"
#include "core/traversal/pointer_set.h"

namespace fsdp::traversal {

void set_child_slot(nn::Module& parent, std::size_t index, nn::ModulePtr child) {
  const auto& slots = parent.child_slots();
  FSDP_CHECK(index < slots.size(), IndexError, "{} has no child slot {}", parent.type_name(),
             index);
  if (slots[index].second == child) return;  // setattr of the same object changes nothing
  parent.replace_child_at(index, std::move(child));
}

void post_order_apply(const nn::ModulePtr& root, const ApplyFn& fn) {
  struct Frame {
    nn::ModulePtr module;
    nn::Module* parent;    // null for the root
    std::size_t slot;      // the module's slot in parent
    std::size_t next = 0;  // next child slot to look at
  };
  PointerSet visited;
  visited.insert(root.get());
  std::vector<Frame> stack;
  stack.push_back({root, nullptr, 0});
  while (!stack.empty()) {
    Frame& top = stack.back();
    // Slots are read lazily, as Python's named_children generator does.
    const auto& slots = top.module->child_slots();
    bool descended = false;
    while (top.next < slots.size()) {
      std::size_t i = top.next++;
      const nn::ModulePtr& child = slots[i].second;
      if (!child || !visited.insert(child.get())) continue;
      nn::Module* parent = top.module.get();
      stack.push_back({child, parent, i});  // invalidates `top`
      descended = true;
      break;
    }
    if (descended) continue;
    Frame done = std::move(stack.back());
    stack.pop_back();
    nn::ModulePtr replacement = fn(done.module);
    if (!replacement) continue;
    if (done.parent == nullptr)
      throw AssertionError(
          fmt::format("Non-root modules should have their parent module set but got None for {}",
                      done.module->repr()));
    FSDP_CHECK(!done.parent->child_slots()[done.slot].first.empty(), AssertionError,
               "Non-root modules should have their module name set but got an empty module "
               "name for {}",
               done.module->repr());
    set_child_slot(*done.parent, done.slot, std::move(replacement));
  }
}

PostOrderNamedModules::PostOrderNamedModules(const nn::ModulePtr& root) {
  PointerSet visited;
  visited.insert(root.get());
  entries_.push_back({root, -1, nullptr});
  std::vector<std::size_t> stack{0};
  std::vector<std::size_t> reverse_order;
  while (!stack.empty()) {
    std::size_t e = stack.back();
    stack.pop_back();
    reverse_order.push_back(e);
    nn::ModulePtr module = entries_[e].module;  // copy: entries_ may grow below
    // named_children() order; a repeat of one object under this parent is already in `visited`.
    for (const auto& [child_name, child] : module->child_slots()) {
      if (!child || !visited.insert(child.get())) continue;
      stack.push_back(entries_.size());
      entries_.push_back({child, static_cast<std::int64_t>(e), &child_name});
    }
  }
  order_.assign(reverse_order.rbegin(), reverse_order.rend());
}

std::string PostOrderNamedModules::name(std::size_t i) const {
  std::vector<const std::string*> parts;
  for (std::int64_t e = static_cast<std::int64_t>(order_[i]); entries_[e].parent != -1;
       e = entries_[e].parent)
    parts.push_back(entries_[e].segment);
  return join_fqn_leaf_first(parts);
}

std::vector<std::pair<std::string, nn::ModulePtr>> post_order_named_modules(
    const nn::ModulePtr& root) {
  PostOrderNamedModules named(root);
  std::vector<std::pair<std::string, nn::ModulePtr>> out;
  out.reserve(named.size());
  for (std::size_t i = 0; i < named.size(); ++i) out.emplace_back(named.name(i), named.module(i));
  return out;
}

}  // namespace fsdp::traversal
