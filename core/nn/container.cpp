#include "core/nn/container.h"

#include "core/error.h"

namespace fsdp::nn {

namespace {
// Python's _get_abs_string_index: wraps negative indices, IndexError out of range.
std::size_t abs_index(std::int64_t idx, std::size_t size, const std::string& cls) {
  const auto n = static_cast<std::int64_t>(size);
  FSDP_CHECK(idx >= -n && idx < n, IndexError, "index {} is out of range ({} of size {})", idx, cls,
             n);
  return static_cast<std::size_t>(idx < 0 ? idx + n : idx);
}

template <typename C>
std::shared_ptr<C> clone_children(const Module& m) {
  auto out = std::make_shared<C>();
  for (const auto& [name, c] : m.child_slots())
    out->register_module(name, c ? clone_structure_of(*c) : ModulePtr());
  return out;
}
}  // namespace

// --- Sequential
Sequential::Sequential(std::initializer_list<ModulePtr> modules)
    : Sequential(std::vector<ModulePtr>(modules)) {}

Sequential::Sequential(const std::vector<ModulePtr>& modules) : Module(static_class()) {
  for (const auto& m : modules) append(m);
}

Sequential::Sequential(const std::vector<std::pair<std::string, ModulePtr>>& named)
    : Module(static_class()) {
  for (const auto& [name, m] : named) register_module(name, m);
}

void Sequential::append(ModulePtr module) {
  register_module(std::to_string(size()), std::move(module));
}

const ModulePtr& Sequential::operator[](std::int64_t idx) const {
  return child_slots()[abs_index(idx, size(), type_name())].second;
}

Value Sequential::forward(const Args& args) {
  FSDP_CHECK(args.size() == 1 && args.kwargs.empty(), TypeError,
             "Sequential.forward() takes one input (got {} positional and {} keyword arguments)",
             args.size(), args.kwargs.size());
  Value x = args.positional[0];
  for (const auto& [name, m] : child_slots())
    if (m) x = (*m)(Args{x});
  return x;
}

ModulePtr Sequential::clone_structure() const {
  return clone_children<Sequential>(*this);
}

// --- ModuleList
ModuleList::ModuleList(std::initializer_list<ModulePtr> modules)
    : ModuleList(std::vector<ModulePtr>(modules)) {}

ModuleList::ModuleList(const std::vector<ModulePtr>& modules) : Module(static_class()) {
  extend(modules);
}

void ModuleList::append(ModulePtr module) {
  register_module(std::to_string(size()), std::move(module));
}

void ModuleList::extend(const std::vector<ModulePtr>& modules) {
  for (const auto& m : modules) append(m);
}

void ModuleList::insert(std::int64_t index, ModulePtr module) {
  const auto n = static_cast<std::int64_t>(size());
  // Python's list.insert clamps the index instead of raising.
  std::int64_t at = index < 0 ? std::max<std::int64_t>(0, index + n) : std::min(index, n);
  register_module(std::to_string(n), nullptr);
  for (std::int64_t i = n; i > at; --i)
    replace_child(std::to_string(i), child(std::to_string(i - 1)));
  replace_child(std::to_string(at), std::move(module));
}

const ModulePtr& ModuleList::operator[](std::int64_t idx) const {
  return child_slots()[abs_index(idx, size(), type_name())].second;
}

void ModuleList::set(std::int64_t idx, ModulePtr module) {
  replace_child(child_slots()[abs_index(idx, size(), type_name())].first, std::move(module));
}

ModulePtr ModuleList::clone_structure() const {
  return clone_children<ModuleList>(*this);
}

// --- ModuleDict
ModuleDict::ModuleDict(const std::vector<std::pair<std::string, ModulePtr>>& items)
    : Module(static_class()) {
  update(items);
}

void ModuleDict::insert(const std::string& key, ModulePtr module) {
  if (has_child(key))
    replace_child(key, std::move(module));
  else
    register_module(key, std::move(module));
}

void ModuleDict::update(const std::vector<std::pair<std::string, ModulePtr>>& items) {
  for (const auto& [k, m] : items) insert(k, m);
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, m] : child_slots()) out.push_back(k);
  return out;
}

std::vector<ModulePtr> ModuleDict::values() const {
  std::vector<ModulePtr> out;
  for (const auto& [k, m] : child_slots()) out.push_back(m);
  return out;
}

ModulePtr ModuleDict::clone_structure() const {
  return clone_children<ModuleDict>(*this);
}

}  // namespace fsdp::nn
