// torch.nn containers: Sequential, ModuleList and ModuleDict. They hold their modules in child
// slots named "0", "1", ... (or by key), so FQNs read "layers.0.weight" as in PyTorch.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/module.h"
#include "core/nn/cloneable.h"

namespace fsdp::nn {

// Iterates the current occupants of a module's child slots (skipping empty ones).
class SlotIterator {
 public:
  using Inner = std::vector<std::pair<std::string, ModulePtr>>::const_iterator;
  SlotIterator(Inner it, Inner end) : it_(it), end_(end) { skip(); }
  const ModulePtr& operator*() const { return it_->second; }
  SlotIterator& operator++() {
    ++it_;
    skip();
    return *this;
  }
  bool operator==(const SlotIterator& o) const { return it_ == o.it_; }

 private:
  void skip() {
    while (it_ != end_ && !it_->second) ++it_;
  }
  Inner it_, end_;
};

// Calls its modules in order, each on the previous one's output.
class Sequential : public Module, public Cloneable {
 public:
  FSDP_MODULE_CLASS(Sequential, Module)
  Sequential() : Module(static_class()) {}
  Sequential(std::initializer_list<ModulePtr> modules);
  explicit Sequential(const std::vector<ModulePtr>& modules);
  // Python's Sequential(OrderedDict(...)): named slots.
  explicit Sequential(const std::vector<std::pair<std::string, ModulePtr>>& named);

  Value forward(const Args& args) override;
  Tensor forward(const Tensor& input) { return forward(Args{Value(input)}).tensor(); }

  void append(ModulePtr module);
  void push_back(ModulePtr module) { append(std::move(module)); }
  std::size_t size() const { return child_slots().size(); }
  // Python indexing: negative counts from the end; IndexError when out of range.
  const ModulePtr& operator[](std::int64_t idx) const;
  SlotIterator begin() const { return {child_slots().begin(), child_slots().end()}; }
  SlotIterator end() const { return {child_slots().end(), child_slots().end()}; }
  ModulePtr clone_structure() const override;
};

// Holds modules in a list; has no forward (calling it raises NotImplementedError, as in torch).
class ModuleList : public Module, public Cloneable {
 public:
  FSDP_MODULE_CLASS(ModuleList, Module)
  ModuleList() : Module(static_class()) {}
  ModuleList(std::initializer_list<ModulePtr> modules);
  explicit ModuleList(const std::vector<ModulePtr>& modules);

  using Module::forward;
  void append(ModulePtr module);
  void push_back(ModulePtr module) { append(std::move(module)); }
  void extend(const std::vector<ModulePtr>& modules);
  // Inserts before index (negative counts from the end), shifting later modules up one name.
  void insert(std::int64_t index, ModulePtr module);
  std::size_t size() const { return child_slots().size(); }
  const ModulePtr& operator[](std::int64_t idx) const;
  // Python's `list[idx] = module` (replaces the slot's occupant).
  void set(std::int64_t idx, ModulePtr module);
  SlotIterator begin() const { return {child_slots().begin(), child_slots().end()}; }
  SlotIterator end() const { return {child_slots().end(), child_slots().end()}; }
  ModulePtr clone_structure() const override;
};

// Holds modules by string key, in insertion order; no forward.
class ModuleDict : public Module, public Cloneable {
 public:
  FSDP_MODULE_CLASS(ModuleDict, Module)
  ModuleDict() : Module(static_class()) {}
  explicit ModuleDict(const std::vector<std::pair<std::string, ModulePtr>>& items);

  using Module::forward;
  // Python's dict[key] = module: replaces an existing key's module, else appends.
  void insert(const std::string& key, ModulePtr module);
  void update(const std::vector<std::pair<std::string, ModulePtr>>& items);
  bool contains(const std::string& key) const { return has_child(key); }
  const ModulePtr& operator[](const std::string& key) const { return child(key); }
  std::size_t size() const { return child_slots().size(); }
  std::vector<std::string> keys() const;
  std::vector<ModulePtr> values() const;
  const std::vector<std::pair<std::string, ModulePtr>>& items() const { return child_slots(); }
  ModulePtr clone_structure() const override;
};

}  // namespace fsdp::nn
