// Module: lifetime, children, parameter/buffer/tensor slots, traversal, modes and conversions.
// Classes: module_class.cpp; state dicts: module_state_dict.cpp; calling and hooks:
// module_call.cpp; printing: module_repr.cpp.
#include "core/module.h"

#include <algorithm>
#include <mutex>
#include <unordered_set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/fqn.h"

namespace fsdp::nn {

namespace {
// This module as a ModulePtr: owning when it is held by a shared_ptr, else a non-owning alias
// (a module on the stack can still be traversed).
ModulePtr self_ptr(Module* m) {
  if (auto p = m->weak_from_this().lock()) return p;
  return ModulePtr(ModulePtr(), m);
}
}  // namespace

// --- lifetime
Module::Module(const ModuleClass& cls) : class_(&cls) {}

Module::~Module() {
  thread_local bool t_deleting = false;
  thread_local std::vector<ModulePtr> t_pending;
  for (auto& [name, c] : children_)
    if (c) t_pending.push_back(std::move(c));
  if (t_deleting) return;
  t_deleting = true;
  while (!t_pending.empty()) {
    ModulePtr m = std::move(t_pending.back());
    t_pending.pop_back();
  }
  t_deleting = false;
}

// --- children
namespace {
constexpr std::size_t kIndexThreshold = 16;  // slots before a module builds its name index
}  // namespace

const std::pair<Module::SlotKind, std::size_t>* Module::find_slot(const std::string& name) const {
  if (index_) {
    auto it = index_->find(name);
    return it == index_->end() ? nullptr : &it->second;
  }
  thread_local std::pair<SlotKind, std::size_t> found;
  for (std::size_t i = 0; i < children_.size(); ++i)
    if (children_[i].first == name) return &(found = {SlotKind::Child, i});
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (params_[i].first == name) return &(found = {SlotKind::Param, i});
  for (std::size_t i = 0; i < buffers_.size(); ++i)
    if (buffers_[i].first == name) return &(found = {SlotKind::Buffer, i});
  return nullptr;
}

void Module::rebuild_index() {
  index_ = std::make_unique<std::unordered_map<std::string, std::pair<SlotKind, std::size_t>>>();
  for (std::size_t i = 0; i < children_.size(); ++i)
    index_->emplace(children_[i].first, std::make_pair(SlotKind::Child, i));
  for (std::size_t i = 0; i < params_.size(); ++i)
    index_->emplace(params_[i].first, std::make_pair(SlotKind::Param, i));
  for (std::size_t i = 0; i < buffers_.size(); ++i)
    index_->emplace(buffers_[i].first, std::make_pair(SlotKind::Buffer, i));
}

void Module::index_slot(const std::string& name, SlotKind kind, std::size_t index) {
  if (index_) {
    index_->emplace(name, std::make_pair(kind, index));
  } else if (children_.size() + params_.size() + buffers_.size() > kIndexThreshold) {
    rebuild_index();
  }
}

void Module::check_new_name(const std::string& name, const char* what) const {
  FSDP_CHECK(!name.empty(), KeyError, "{} name can't be empty string \"\" (in {})", what,
             type_name());
  FSDP_CHECK(name.find('.') == std::string::npos, KeyError,
             "{} name can't contain \".\", got: {} (in {})", what, name, type_name());
  for (const auto& [n, t] : tensor_attrs_)
    FSDP_CHECK(n != name, KeyError,
               "attribute '{}' already exists as a tensor attribute of {}: cannot register a {} "
               "with the same name",
               name, type_name(), what);
  if (const auto* slot = find_slot(name)) {
    const char* kind = slot->first == SlotKind::Child   ? "child module"
                       : slot->first == SlotKind::Param ? "parameter"
                                                        : "buffer";
    throw KeyError(
        fmt::format("attribute '{}' already exists as a {} of {}: cannot register a {} "
                    "with the same name",
                    name, kind, type_name(), what));
  }
}

ModulePtr Module::register_module(const std::string& name, ModulePtr child) {
  check_new_name(name, "module");
  children_.emplace_back(name, child);
  index_slot(name, SlotKind::Child, children_.size() - 1);
  return child;
}

void Module::replace_child(const std::string& name, ModulePtr child) {
  const auto* slot = find_slot(name);
  if (!slot || slot->first != SlotKind::Child) (void)this->child(name);  // throws KeyError
  children_[slot->second].second = std::move(child);
}

void Module::replace_child_at(std::size_t index, ModulePtr child) {
  FSDP_CHECK(index < children_.size(), IndexError, "{} has no child slot {} (it has {})",
             type_name(), index, children_.size());
  children_[index].second = std::move(child);
}

bool Module::has_child(const std::string& name) const {
  const auto* slot = find_slot(name);
  return slot && slot->first == SlotKind::Child;
}

namespace {
template <typename Slots>
std::string list_names(const Slots& slots) {
  std::string s;
  for (const auto& [n, v] : slots) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "none" : s;
}
}  // namespace

const ModulePtr& Module::child(const std::string& name) const {
  const auto* slot = find_slot(name);
  if (slot && slot->first == SlotKind::Child) return children_[slot->second].second;
  throw KeyError(fmt::format("{} has no child module '{}' (children: {})", type_name(), name,
                             list_names(children_)));
}

std::vector<std::pair<std::string, ModulePtr>> Module::named_children() const {
  std::vector<std::pair<std::string, ModulePtr>> out;
  std::unordered_set<const Module*> memo;
  for (const auto& [n, c] : children_)
    if (c && memo.insert(c.get()).second) out.emplace_back(n, c);
  return out;
}

std::vector<ModulePtr> Module::children() const {
  std::vector<ModulePtr> out;
  for (auto& [n, c] : named_children()) out.push_back(c);
  return out;
}

std::vector<std::pair<std::string, ModulePtr>> Module::named_modules(const std::string& prefix,
                                                                     bool remove_duplicate) {
  std::vector<std::pair<std::string, ModulePtr>> out;
  std::unordered_set<const Module*> memo;
  // Explicit stack; children pushed in reverse so they pop in registration order, which gives
  // exactly the recursive pre-order (the memo is checked when a module is reached, as upstream).
  std::vector<std::pair<std::string, ModulePtr>> stack{{prefix, self_ptr(this)}};
  while (!stack.empty()) {
    auto [name, m] = std::move(stack.back());
    stack.pop_back();
    if (remove_duplicate && !memo.insert(m.get()).second) continue;
    const auto& slots = m->children_;
    for (auto it = slots.rbegin(); it != slots.rend(); ++it) {
      if (!it->second) continue;
      stack.emplace_back(join_fqn(name, it->first), it->second);
    }
    out.emplace_back(std::move(name), std::move(m));
  }
  return out;
}

void Module::visit_named_modules(
    const std::function<void(const std::string&, const ModulePtr&)>& fn, const std::string& prefix,
    bool remove_duplicate) {
  struct Item {
    ModulePtr module;
    std::size_t parent_len;  // length of the parent's path in `path`
    const std::string* segment;
  };
  std::unordered_set<const Module*> memo;
  std::string path = prefix;
  std::vector<Item> stack{{self_ptr(this), 0, nullptr}};
  while (!stack.empty()) {
    Item item = std::move(stack.back());
    stack.pop_back();
    if (remove_duplicate && !memo.insert(item.module.get()).second) continue;
    if (item.segment) {  // everything handled since the push lies under the parent: its path is
                         // intact
      path.resize(item.parent_len);
      if (!path.empty()) path += '.';
      path += *item.segment;
    }
    const std::size_t len = path.size();
    const auto& slots = item.module->children_;
    for (auto it = slots.rbegin(); it != slots.rend(); ++it)
      if (it->second) stack.push_back({it->second, len, &it->first});
    fn(path, item.module);
  }
}

std::vector<ModulePtr> Module::modules() {
  std::vector<ModulePtr> out;
  visit_named_modules([&](const std::string&, const ModulePtr& m) { out.push_back(m); });
  return out;
}

ModulePtr Module::get_submodule(const std::string& path) {
  ModulePtr m = self_ptr(this);
  if (path.empty()) return m;
  std::size_t start = 0;
  std::string walked;
  while (start <= path.size()) {
    std::size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!m->has_child(part) || !m->child(part))
      throw KeyError(fmt::format("{} has no attribute `{}` (while resolving '{}')",
                                 walked.empty() ? m->type_name() : walked, part, path));
    m = m->child(part);
    walked += (walked.empty() ? "" : ".") + part;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return m;
}

// --- parameters and buffers
Tensor Module::register_parameter(const std::string& name, Tensor param, bool requires_grad) {
  check_new_name(name, "parameter");
  if (param.defined() && param.is_leaf() && param.is_floating_point())
    param.requires_grad_(requires_grad);
  params_.emplace_back(name, param);
  index_slot(name, SlotKind::Param, params_.size() - 1);
  return param;
}

Tensor Module::register_buffer(const std::string& name, Tensor buffer, bool persistent) {
  check_new_name(name, "buffer");
  buffers_.emplace_back(name, buffer);
  index_slot(name, SlotKind::Buffer, buffers_.size() - 1);
  if (!persistent) non_persistent_.insert(name);
  return buffer;
}

bool Module::has_parameter(const std::string& name) const {
  for (const auto& [n, p] : params_)
    if (n == name) return true;
  return false;
}
bool Module::has_buffer(const std::string& name) const {
  for (const auto& [n, b] : buffers_)
    if (n == name) return true;
  return false;
}

const Tensor& Module::param(const std::string& name) const {
  for (const auto& [n, p] : params_)
    if (n == name) return p;
  for (const auto& [n, t] : tensor_attrs_)
    if (n == name) return t;
  throw KeyError(fmt::format("{} has no parameter '{}' (parameters: {})", type_name(), name,
                             list_names(params_)));
}
const Tensor& Module::buffer(const std::string& name) const {
  for (const auto& [n, b] : buffers_)
    if (n == name) return b;
  throw KeyError(
      fmt::format("{} has no buffer '{}' (buffers: {})", type_name(), name, list_names(buffers_)));
}

void Module::set_parameter(const std::string& name, Tensor p) {
  for (auto& [n, slot] : params_)
    if (n == name) {
      slot = std::move(p);
      return;
    }
  (void)param(name);
}
void Module::set_buffer(const std::string& name, Tensor b) {
  for (auto& [n, slot] : buffers_)
    if (n == name) {
      slot = std::move(b);
      return;
    }
  (void)buffer(name);
}

void Module::set_tensor_attribute(const std::string& name, Tensor t) {
  for (auto& [n, slot] : tensor_attrs_)
    if (n == name) {
      slot = std::move(t);
      return;
    }
  check_new_name(name, "tensor attribute");
  tensor_attrs_.emplace_back(name, std::move(t));
}

bool Module::has_tensor_attribute(const std::string& name) const {
  for (const auto& [n, t] : tensor_attrs_)
    if (n == name) return true;
  return false;
}

const Tensor& Module::tensor_attribute(const std::string& name) const {
  for (const auto& [n, t] : tensor_attrs_)
    if (n == name) return t;
  throw KeyError(fmt::format("{} has no tensor attribute '{}' (tensor attributes: {})", type_name(),
                             name, list_names(tensor_attrs_)));
}

Tensor Module::remove_tensor_attribute(const std::string& name) {
  for (auto it = tensor_attrs_.begin(); it != tensor_attrs_.end(); ++it)
    if (it->first == name) {
      Tensor t = std::move(it->second);
      tensor_attrs_.erase(it);
      return t;
    }
  (void)tensor_attribute(name);
  return {};
}

Tensor Module::remove_parameter(const std::string& name) {
  for (auto it = params_.begin(); it != params_.end(); ++it)
    if (it->first == name) {
      Tensor t = it->second;
      params_.erase(it);
      if (index_) rebuild_index();  // later parameters moved down one slot
      return t;
    }
  (void)param(name);
  return {};
}

// --- modes and conversions
Module& Module::train(bool mode) {
  for (auto& m : modules()) m->training_ = mode;
  return *this;
}

Module& Module::to(DType dtype) {
  autograd::NoGradGuard no_grad;
  for (auto& m : modules()) {
    for (auto& [n, p] : m->params_)
      if (p.defined() && p.is_floating_point() && p.dtype() != dtype)
        p.set_data(p.detach().to(dtype));
    for (auto& [n, b] : m->buffers_)
      if (b.defined() && b.is_floating_point() && b.dtype() != dtype)
        b.set_data(b.detach().to(dtype));
  }
  return *this;
}

Module& Module::to(Device device) {
  autograd::NoGradGuard no_grad;
  for (auto& m : modules()) {
    for (auto& [n, p] : m->params_)
      if (p.defined() && p.device() != device) p.set_data(p.detach().to(device));
    for (auto& [n, b] : m->buffers_)
      if (b.defined() && b.device() != device) b.set_data(b.detach().to(device));
  }
  return *this;
}

Module& Module::to_empty(Device device, bool recurse) {
  autograd::NoGradGuard no_grad;
  std::unordered_set<const TensorImpl*> done;  // a tied tensor is materialised once
  auto materialise = [&](const Tensor& t) {
    if (!t.defined() || !done.insert(t.impl()).second) return;
    t.set_data(empty(t.shape(), TensorOptions(t.dtype(), device)));
    if (const Tensor g = t.grad(); g.defined())
      t.set_grad(empty(g.shape(), TensorOptions(g.dtype(), device)));
  };
  auto visit = [&](Module& m) {
    for (auto& [n, p] : m.params_) materialise(p);
    for (auto& [n, b] : m.buffers_) materialise(b);
  };
  if (recurse) {
    for (auto& m : modules()) visit(*m);
  } else {
    visit(*this);
  }
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  for (auto& p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none)
      p.set_grad(Tensor());
    else
      g.zero_();
  }
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  // Post-order (children first), iteratively.
  std::vector<Module*> order;
  std::unordered_set<const Module*> done;
  std::vector<std::pair<Module*, bool>> stack{{this, false}};
  while (!stack.empty()) {
    auto [m, expanded] = stack.back();
    stack.pop_back();
    if (expanded) {
      order.push_back(m);
      continue;
    }
    if (!done.insert(m).second) continue;
    stack.emplace_back(m, true);
    const auto& slots = m->children_;
    for (auto it = slots.rbegin(); it != slots.rend(); ++it)
      if (it->second) stack.emplace_back(it->second.get(), false);
  }
  for (Module* m : order) fn(*m);
  return *this;
}

std::any& Module::attr(const std::string& name) {
  auto it = attrs_.find(name);
  FSDP_CHECK(it != attrs_.end(), KeyError, "'{}' object has no attribute '{}'", type_name(), name);
  return it->second;
}
const std::any& Module::attr(const std::string& name) const {
  auto it = attrs_.find(name);
  FSDP_CHECK(it != attrs_.end(), KeyError, "'{}' object has no attribute '{}'", type_name(), name);
  return it->second;
}

}  // namespace fsdp::nn
