// Policy objects (PyTorch's `_Policy`): given the root, the ignored modules and the root's
// wrapper options, name every module to wrap and the options to wrap it with. They run in the
// post-order-apply engine (auto_wrap.h); a policy that also has a callable form
// (ModuleWrapPolicy) works in the `_recursive_wrap` engine too.
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/module.h"
#include "core/traversal/module_sets.h"
#include "policies/options.h"

namespace fsdp::policies {

// Target modules and their options, in insertion order (Python's dict keyed by module identity).
class TargetModules {
 public:
  bool contains(const nn::Module* m) const { return index_.count(m) > 0; }
  // The entry's options, or null.
  WrapperOptions* find(const nn::Module* m);
  const WrapperOptions* find(const nn::Module* m) const;
  // Sets the options of `m` (keeping its first insertion position, as a dict does).
  void set(const nn::ModulePtr& m, WrapperOptions options);
  std::size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const std::vector<std::pair<nn::ModulePtr, WrapperOptions>>& entries() const { return entries_; }
  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }
  traversal::ModuleSet keys() const;

 private:
  std::vector<std::pair<nn::ModulePtr, WrapperOptions>> entries_;
  std::unordered_map<const nn::Module*, std::size_t> index_;
};

class Policy {
 public:
  virtual ~Policy() = default;
  // Maps each module to wrap to its options; modules in `ignored_modules` are never chosen.
  virtual TargetModules run_policy(const nn::ModulePtr& root,
                                   const traversal::ModuleSet& ignored_modules,
                                   const WrapperOptions& root_options) const = 0;
  // The callable form used by the `_recursive_wrap` engine, or null (not callable).
  virtual CallablePolicy as_callable() const { return nullptr; }
  // Python's repr, e.g. "ModuleWrapPolicy({Linear})".
  virtual std::string repr() const = 0;
};

}  // namespace fsdp::policies
