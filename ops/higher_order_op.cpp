#include "ops/higher_order_op.h"

#include <fmt/format.h>

#include <map>
#include <mutex>

#include "core/autograd.h"
#include "core/error.h"

namespace fsdp::ops {

namespace {
thread_local std::array<bool, kNumDispatchKeys> t_excluded{};

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, const HigherOrderOperator*>& registry() {
  static std::map<std::string, const HigherOrderOperator*> r;
  return r;
}

bool excluded(DispatchKey k) {
  return t_excluded[static_cast<std::size_t>(k)];
}
}  // namespace

std::string key_name(DispatchKey key) {
  static const char* names[] = {"Functionalize", "Tracing", "Fake", "Autograd", "Dense"};
  return std::string("DispatchKey.") + names[static_cast<std::size_t>(key)];
}

bool key_of_mode(dispatch::ModeKind kind, DispatchKey& key) {
  switch (kind) {
    case dispatch::ModeKind::Tracing:
      key = DispatchKey::Tracing;
      return true;
    case dispatch::ModeKind::Fake:
      key = DispatchKey::Fake;
      return true;
    case dispatch::ModeKind::Functionalize:
      key = DispatchKey::Functionalize;
      return true;
    default:
      return false;
  }
}

HigherOrderOperator::HigherOrderOperator(std::string name) : name_(std::move(name)) {
  std::lock_guard lock(registry_mutex());
  auto [it, inserted] = registry().emplace(name_, this);
  FSDP_CHECK(inserted, RuntimeError, "a higher-order operator named {} is already registered",
             name_);
}

HigherOrderOperator::~HigherOrderOperator() {
  std::lock_guard lock(registry_mutex());
  registry().erase(name_);
}

const HigherOrderOperator* find_operator(const std::string& name) {
  std::lock_guard lock(registry_mutex());
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : it->second;
}

void HigherOrderOperator::register_kernel(DispatchKey key, Kernel kernel) {
  FSDP_CHECK(!kernels_[index(key)] && !fallthrough_[index(key)], RuntimeError,
             "Trying to override a python impl for {} on operator {}", key_name(key), name_);
  kernels_[index(key)] = std::move(kernel);
}

void HigherOrderOperator::register_fallthrough(DispatchKey key) {
  FSDP_CHECK(!kernels_[index(key)] && !fallthrough_[index(key)], RuntimeError,
             "Trying to override a python impl for {} on operator {}", key_name(key), name_);
  fallthrough_[index(key)] = true;
}

void HigherOrderOperator::register_functionalize_impl(FunctionalizeRule rule) {
  register_kernel(DispatchKey::Functionalize,
                  [rule = std::move(rule)](const KernelContext&, const HopArgs& args) {
                    FunctionalizeContext ctx;
                    return rule(ctx, args);
                  });
}

namespace {
[[noreturn]] void throw_no_kernel(const std::string& op, DispatchKey final_key, DispatchKey from) {
  throw NotImplementedError(fmt::format(
      "could not find kernel for HigherOrderOperator {} at dispatch key {} (resolved from {})", op,
      key_name(final_key), key_name(from)));
}

[[noreturn]] void throw_no_mode_rule(const std::string& op, const std::string& mode) {
  throw NotImplementedError(fmt::format(
      "There was no rule registered for HigherOrderOperator {0} and mode {1}.Hint: set {1}'s "
      "supports_higher_order_operators to True. This causes all higher order operators to pass "
      "through {1}'s handle_hop, so handle them accordingly by adding support for "
      "HigherOrderOperators (in this case, {0}) in {1}'s handle_hop.",
      op, mode));
}
}  // namespace

DispatchKey HigherOrderOperator::dispatch_key(const HopArgs& args) const {
  if (auto* mode = dispatch::current_mode()) {
    DispatchKey k;
    if (key_of_mode(mode->kind(), k)) return k;
  }
  if (!excluded(DispatchKey::Autograd) && autograd::any_requires_grad(args.tensors()) &&
      !fallthrough_[index(DispatchKey::Autograd)])
    return DispatchKey::Autograd;
  return DispatchKey::Dense;
}

nn::Value HigherOrderOperator::operator()(HopArgs args) const {
  if (auto* mode = dispatch::current_mode()) {
    DispatchKey k;
    if (key_of_mode(mode->kind(), k) && has_kernel(k) && !excluded(k)) {
      dispatch::PopModeGuard pop;
      return kernels_[index(k)](KernelContext{*this, k, pop.mode()}, args);
    }
    if (mode->supports_higher_order_operators()) {
      auto* hop_mode = dynamic_cast<HopMode*>(mode);
      FSDP_CHECK(hop_mode != nullptr, TypeError,
                 "{} supports higher-order operators but is not a HopMode", mode->name());
      dispatch::PopModeGuard pop;
      return hop_mode->handle_hop(*this, args);
    }
    throw_no_mode_rule(name_, mode->name());
  }
  const DispatchKey key = dispatch_key(args);
  return call_kernel(key, args);
}

nn::Value HigherOrderOperator::call_kernel(DispatchKey key, const HopArgs& args,
                                           dispatch::ModePtr mode) const {
  DispatchKey k = key;
  while (fallthrough_[index(k)] && k != DispatchKey::Dense)
    k = static_cast<DispatchKey>(index(k) + 1);
  if (!kernels_[index(k)]) throw_no_kernel(name_, k, key);
  return kernels_[index(k)](KernelContext{*this, k, std::move(mode)}, args);
}

ExcludeKeyGuard::ExcludeKeyGuard(DispatchKey key) : key_(key), prev_(excluded(key)) {
  t_excluded[static_cast<std::size_t>(key)] = true;
}
ExcludeKeyGuard::~ExcludeKeyGuard() {
  t_excluded[static_cast<std::size_t>(key_)] = prev_;
}

}  // namespace fsdp::ops
