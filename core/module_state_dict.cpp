// Module's named parameters and buffers, state_dict and load_state_dict.
#include <algorithm>
#include <mutex>
#include <unordered_set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/fqn.h"
#include "core/module.h"

namespace fsdp::nn {

namespace {
// named_parameters / named_buffers: the tensors of one slot list per module, with FQNs.
using TensorSlots = std::vector<std::pair<std::string, Tensor>>;
TensorSlots named_tensors(Module& root, const std::string& prefix, bool recurse,
                          bool remove_duplicate, const TensorSlots& (*slots_of)(const Module&)) {
  TensorSlots out;
  std::unordered_set<const TensorImpl*> memo;
  auto visit = [&](const std::string& mprefix, const Module& m) {
    for (const auto& [n, t] : slots_of(m)) {
      if (!t.defined()) continue;
      if (remove_duplicate && !memo.insert(t.impl()).second) continue;
      out.emplace_back(join_fqn(mprefix, n), t);
    }
  };
  if (!recurse) {
    visit(prefix, root);
    return out;
  }
  root.visit_named_modules([&](const std::string& name, const ModulePtr& m) { visit(name, *m); },
                           prefix, remove_duplicate);
  return out;
}
}  // namespace

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(const std::string& prefix,
                                                                     bool recurse,
                                                                     bool remove_duplicate) {
  return named_tensors(*this, prefix, recurse, remove_duplicate,
                       [](const Module& m) -> const TensorSlots& { return m.parameter_slots(); });
}

std::vector<Tensor> Module::parameters(bool recurse) {
  std::vector<Tensor> out;
  std::unordered_set<const TensorImpl*> memo;
  auto visit = [&](const Module& m) {
    for (const auto& [n, p] : m.params_)
      if (p.defined() && memo.insert(p.impl()).second) out.push_back(p);
  };
  if (!recurse)
    visit(*this);
  else
    for (auto& m : modules()) visit(*m);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(const std::string& prefix,
                                                                  bool recurse,
                                                                  bool remove_duplicate) {
  return named_tensors(*this, prefix, recurse, remove_duplicate,
                       [](const Module& m) -> const TensorSlots& { return m.buffer_slots(); });
}

std::vector<Tensor> Module::buffers(bool recurse) {
  std::vector<Tensor> out;
  for (auto& [n, b] : named_buffers("", recurse)) out.push_back(b);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_persistent_buffers() {
  std::unordered_set<std::string> in_state_dict;
  for (const auto& [name, t] : state_dict()) in_state_dict.insert(name);
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, b] : named_buffers())
    if (in_state_dict.count(name)) out.emplace_back(name, b);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::state_dict(const std::string& prefix) {
  // PyTorch recurses through _modules without a memo: shared modules appear under each name.
  std::vector<std::pair<std::string, Tensor>> out;
  std::vector<std::pair<std::string, Module*>> stack{{prefix, this}};
  while (!stack.empty()) {
    const auto [p, m] = stack.back();
    stack.pop_back();
    // Captured by name (clang 14 cannot capture a structured binding).
    auto join = [&base = p](const std::string& n) { return join_fqn(base, n); };
    for (const auto& [n, t] : m->params_)
      if (t.defined()) out.emplace_back(join(n), t);
    for (const auto& [n, t] : m->buffers_)
      if (t.defined() && !m->non_persistent_.count(n)) out.emplace_back(join(n), t);
    for (auto it = m->children_.rbegin(); it != m->children_.rend(); ++it)
      if (it->second) stack.emplace_back(join(it->first), it->second.get());
  }
  return out;
}

void Module::load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state,
                             bool strict) {
  auto own = state_dict();
  std::map<std::string, Tensor> given(state.begin(), state.end());
  std::vector<std::string> missing, unexpected;
  std::set<std::string> own_keys;
  for (auto& [k, t] : own) {
    own_keys.insert(k);
    auto it = given.find(k);
    if (it == given.end()) {
      missing.push_back(k);
      continue;
    }
    FSDP_CHECK(it->second.shape() == t.shape(), RuntimeError,
               "Error(s) in loading state_dict for {}: size mismatch for {}: copying a param with "
               "shape {} from checkpoint, the shape in current model is {}.",
               type_name(), k, shape_str(it->second.shape()), shape_str(t.shape()));
    autograd::NoGradGuard no_grad;
    Tensor dst = t;
    dst.copy_(it->second);
  }
  for (auto& [k, t] : state)
    if (!own_keys.count(k)) unexpected.push_back(k);
  if (strict && (!missing.empty() || !unexpected.empty())) {
    std::string msg = fmt::format("Error(s) in loading state_dict for {}:", type_name());
    auto quote = [](const std::vector<std::string>& v) {
      std::string s;
      for (const auto& k : v) s += (s.empty() ? "\"" : ", \"") + k + "\"";
      return s;
    };
    if (!missing.empty()) msg += " Missing key(s) in state_dict: " + quote(missing) + ".";
    if (!unexpected.empty()) msg += " Unexpected key(s) in state_dict: " + quote(unexpected) + ".";
    throw RuntimeError(msg);
  }
}

std::int64_t Module::num_parameters() {
  std::int64_t n = 0;
  for (auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace fsdp::nn
