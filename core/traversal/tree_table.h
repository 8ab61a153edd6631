// One pre-order pass over a module tree that records what the wrapping engines ask of every
// module: its parent, its slot in the parent, its subtree's size and its subtree's parameter
// numel (each parameter counted once per subtree, ignored parameters left out), and which
// modules carry a wrapper mark. Built once per auto-wrap, it replaces upstream's per-module
// recounting (quadratic on deep models) and the separate whole-tree passes of the nested-wrapping
// checks: on a model larger than the cache every pass is a walk through main memory.
//
// The table describes a tree: when some module is reachable through two slots (shared
// submodules), `is_tree()` is false and the entries are not usable; callers then run upstream's
// literal algorithms.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/module.h"
#include "core/traversal/module_sets.h"

namespace fsdp::traversal {

class TreeTable {
 public:
  struct Entry {
    nn::Module* module;
    std::int64_t numel;   // unique non-ignored parameter numel of the subtree
    std::int32_t parent;  // entry index of the parent, -1 for the root
    std::int32_t size;    // modules in the subtree, itself included
    std::uint32_t slot;   // index of the module's slot in the parent's child_slots()
  };

  TreeTable(nn::Module& root, const ParamSet& ignored_params);
  ~TreeTable();  // hands its buffers to the next table built on this thread
  TreeTable(const TreeTable&) = delete;
  TreeTable& operator=(const TreeTable&) = delete;

  bool is_tree() const { return is_tree_; }
  // Pre-order (named_modules() order); entry 0 is the root. Empty when !is_tree().
  const std::vector<Entry>& entries() const { return entries_; }
  const Entry& operator[](std::size_t i) const { return entries_[i]; }
  std::size_t size() const { return entries_.size(); }
  // Entry indices of the modules that carry a wrapper mark, in pre-order.
  const std::vector<std::int32_t>& marked() const { return marked_; }
  // The dotted name of entry i relative to the root ("" for the root).
  std::string name(std::size_t i) const;
  // The owning pointer of entry i (`root` for entry 0, else the parent's slot).
  const nn::ModulePtr& module_ptr(std::size_t i, const nn::ModulePtr& root) const;

 private:
  bool is_tree_ = true;
  std::vector<Entry> entries_;
  std::vector<std::int32_t> marked_;
};

}  // namespace fsdp::traversal
