// Post-order traversals of the module tree, iterative (a chain 100 000 deep works) and in
// upstream's exact visiting order and naming.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/module.h"

namespace fsdp::traversal {

// PyTorch's `_post_order_apply`: applies fn to every module (children in registration order
// before their parent, each module once), the root included. A non-null result replaces the
// module in the slot through which it was first reached (Python's setattr on that parent); a
// module shared by two parents is therefore replaced only under the first. Returning non-null
// for the root is an AssertionError (the root has no parent slot).
using ApplyFn = std::function<nn::ModulePtr(const nn::ModulePtr&)>;
void post_order_apply(const nn::ModulePtr& root, const ApplyFn& fn);

// PyTorch's `_get_post_order_named_modules` with names kept as (parent, segment) links: O(n)
// memory even for a chain 100 000 deep, where the materialised names alone would take O(n^2).
class PostOrderNamedModules {
 public:
  explicit PostOrderNamedModules(const nn::ModulePtr& root);
  std::size_t size() const { return order_.size(); }
  const nn::ModulePtr& module(std::size_t i) const { return entries_[order_[i]].module; }
  std::string name(std::size_t i) const;  // the i-th module's dotted name ("" for the root)

 private:
  struct Entry {
    nn::ModulePtr module;
    std::int64_t parent;         // entry index of the parent, -1 for the root
    const std::string* segment;  // slot name in the parent (owned by the parent's slots)
  };
  std::vector<Entry> entries_;      // in push order
  std::vector<std::size_t> order_;  // post-order: entry indices
};

// PyTorch's `_get_post_order_named_modules`: a stack-based DFS whose visit order is reversed.
// Names and visits are claimed when a module is pushed, so for a module shared by two parents
// the later-registered parent's path names it. Example: M(S1(), S2(SS1(), SS2()), S3()) gives
// [S1, SS1, SS2, S2, S3, M].
std::vector<std::pair<std::string, nn::ModulePtr>> post_order_named_modules(
    const nn::ModulePtr& root);

// Python's setattr(parent, name, child) where `index` is the slot's position in
// parent.child_slots() (the engine knows it, so no search by name).
void set_child_slot(nn::Module& parent, std::size_t index, nn::ModulePtr child);

}  // namespace fsdp::traversal
