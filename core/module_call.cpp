// Calling a Module: forward, operator() with its forward pre-hooks and hooks.
#include <algorithm>
#include <mutex>
#include <unordered_set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/fqn.h"
#include "core/module.h"

namespace fsdp::nn {

// --- calling
Value Module::forward(const Args&) {
  throw NotImplementedError(
      fmt::format("Module [{}] is missing the required \"forward\" function", type_name()));
}

Value Module::operator()(const Args& args_in) {
  const Args* args = &args_in;
  std::optional<Args> replaced;
  for (std::size_t i = 0; i < pre_hooks_.size(); ++i) {
    auto hook = pre_hooks_[i];  // copy: a hook may register hooks
    if (!*hook.first) continue;
    if (auto r = hook.second(*this, *args)) {
      replaced = std::move(*r);
      args = &*replaced;
    }
  }
  Value out = forward(*args);
  for (std::size_t i = 0; i < hooks_.size(); ++i) {
    auto hook = hooks_[i];
    if (!*hook.first) continue;
    if (auto r = hook.second(*this, *args, out)) out = std::move(*r);
  }
  return out;
}

HookHandle Module::register_forward_pre_hook(ForwardPreHook hook, bool prepend) {
  auto alive = std::make_shared<bool>(true);
  if (prepend)
    pre_hooks_.insert(pre_hooks_.begin(), {alive, std::move(hook)});
  else
    pre_hooks_.emplace_back(alive, std::move(hook));
  return HookHandle(alive);
}

HookHandle Module::register_forward_hook(ForwardHook hook, bool prepend) {
  auto alive = std::make_shared<bool>(true);
  if (prepend)
    hooks_.insert(hooks_.begin(), {alive, std::move(hook)});
  else
    hooks_.emplace_back(alive, std::move(hook));
  return HookHandle(alive);
}

}  // namespace fsdp::nn
