#include "core/traversal/post_order.h"

#include <unordered_set>

#include "core/error.h"

namespace fsdp::traversal {

void set_child_slot(nn::Module& parent, std::size_t index, nn::ModulePtr child) {
  const auto& slots = parent.child_slots();
  FSDP_CHECK(index < slots.size(), IndexError, "{} has no child slot {}", parent.type_name(),
             index);
  if (slots[index].second == child) return;  // setattr of the same object changes nothing
  parent.replace_child(slots[index].first, std::move(child));
}

void post_order_apply(const nn::ModulePtr& root, const ApplyFn& fn) {
  struct Frame {
    nn::ModulePtr module;
    nn::Module* parent;      // null for the root
    std::size_t slot;        // the module's slot in parent
    std::size_t next = 0;    // next child slot to look at
  };
  std::unordered_set<const nn::Module*> visited{root.get()};
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
      if (!child || !visited.insert(child.get()).second) continue;
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
      throw AssertionError(fmt::format(
          "Non-root modules should have their parent module set but got None for {}",
          done.module->repr()));
    FSDP_CHECK(!done.parent->child_slots()[done.slot].first.empty(), AssertionError,
               "Non-root modules should have their module name set but got an empty module "
               "name for {}",
               done.module->repr());
    set_child_slot(*done.parent, done.slot, std::move(replacement));
  }
}

std::vector<std::pair<std::string, nn::ModulePtr>> post_order_named_modules(
    const nn::ModulePtr& root) {
  std::unordered_set<const nn::Module*> visited{root.get()};
  std::vector<std::pair<std::string, nn::ModulePtr>> stack{{"", root}};
  std::vector<std::pair<std::string, nn::ModulePtr>> reverse_order;
  while (!stack.empty()) {
    auto [name, module] = std::move(stack.back());
    stack.pop_back();
    // named_children() order; a repeat of one object under this parent is already in `visited`.
    for (const auto& [child_name, child] : module->child_slots()) {
      if (!child || !visited.insert(child.get()).second) continue;
      stack.emplace_back(name.empty() ? child_name : name + "." + child_name, child);
    }
    reverse_order.emplace_back(std::move(name), std::move(module));
  }
  return {std::make_move_iterator(reverse_order.rbegin()),
          std::make_move_iterator(reverse_order.rend())};
}

}  // namespace fsdp::traversal
