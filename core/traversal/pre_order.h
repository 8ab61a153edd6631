// Module::named_modules()'s order and de-duplication without building the names: the names of a
// chain n deep take O(n^2) characters, so traversals that only need modules (or one name, for an
// error message) use this instead.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/module.h"
#include "core/traversal/pointer_index.h"

namespace fsdp::traversal {

class PreOrderModules {
 public:
  explicit PreOrderModules(const nn::ModulePtr& root);
  std::size_t size() const { return entries_.size(); }
  const nn::ModulePtr& module(std::size_t i) const { return *entries_[i].module; }
  // Valid while the tree is unchanged (entries point into the parents' slots).
  // The i-th module's dotted name ("" for the root), valid while the tree is unchanged.
  std::string name(std::size_t i) const;
  std::vector<nn::ModulePtr> modules() const;
  // The entry the i-th module was first reached from (-1 for the root) and the slot name it was
  // reached through (null for the root): the tree of first paths, for tables built on this order.
  std::int64_t parent(std::size_t i) const { return entries_[i].parent; }
  const std::string* segment(std::size_t i) const { return entries_[i].segment; }
  // Module address -> its index in this order (moved out: the walk's own memo, reused).
  PointerIndex take_index() { return std::move(index_); }

 private:
  struct Entry {
    const nn::ModulePtr* module;  // the slot holding it (no reference counting on the hot path)
    std::int64_t parent;          // entry index, -1 for the root
    const std::string* segment;   // slot name in the parent
  };
  std::vector<Entry> entries_;
  PointerIndex index_;
};

// root->modules() without names.
std::vector<nn::ModulePtr> modules_of(const nn::ModulePtr& root);

}  // namespace fsdp::traversal
