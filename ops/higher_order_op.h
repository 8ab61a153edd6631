// Higher-order operators: operators that take a function (or a graph module) and run it under a
// changed regime. Each has a name and at most one kernel per dispatch key; a call picks the key
// from the dispatch mode stack, then autograd, then the dense kernel (spec §4.4, PyTorch's
// HigherOrderOperator):
//   1. a mode is active: the kernel of the mode's key (Tracing, Fake, Functionalize), run with the
//      mode popped; else a mode that supports higher-order operators handles the call; else error;
//   2. grad mode is on and a tensor argument requires grad: the Autograd kernel (or, when the
//      operator registered Autograd as a fallthrough, the next key);
//   3. the Dense kernel (PyTorch's CompositeExplicitAutograd).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>

#include "core/dispatch/dispatch_mode.h"
#include "ops/object.h"

namespace fsdp::ops {

// In priority order.
enum class DispatchKey : std::uint8_t { Functionalize, Tracing, Fake, Autograd, Dense };
inline constexpr std::size_t kNumDispatchKeys = 5;
std::string key_name(DispatchKey key);  // "DispatchKey.Autograd"

class HigherOrderOperator;

// What a kernel runs with: the operator, its key, and for a mode key the (popped) mode.
struct KernelContext {
  const HigherOrderOperator& op;
  DispatchKey key;
  dispatch::ModePtr mode;
};
using Kernel = std::function<nn::Value(const KernelContext&, const HopArgs&)>;

// Functionalization's API for a kernel (upstream's ctx): our tensors have no functional
// wrappers, so unwrapping and wrapping are identities; redispatch_to_next() is a scope in which
// calls go to the keys below functionalization (the mode is already popped while the rule runs).
struct FunctionalizeContext {
  HopArgs unwrap_tensors(const HopArgs& args) const { return args; }
  nn::Value wrap_tensors(nn::Value v) const { return v; }
  struct Redispatch {};
  Redispatch redispatch_to_next() const { return {}; }
};
using FunctionalizeRule = std::function<nn::Value(FunctionalizeContext&, const HopArgs&)>;

class HigherOrderOperator {
 public:
  // Registers the operator by name (find_operator); a second operator of one name is an error.
  explicit HigherOrderOperator(std::string name);
  ~HigherOrderOperator();
  HigherOrderOperator(const HigherOrderOperator&) = delete;
  HigherOrderOperator& operator=(const HigherOrderOperator&) = delete;

  const std::string& name() const { return name_; }

  // One kernel per key; a second registration for a key is a RuntimeError.
  void register_kernel(DispatchKey key, Kernel kernel);
  // The key passes calls on to the next key (as upstream's fallthrough keys).
  void register_fallthrough(DispatchKey key);
  // Upstream's py_functionalize_impl.
  void register_functionalize_impl(FunctionalizeRule rule);
  bool has_kernel(DispatchKey key) const { return static_cast<bool>(kernels_[index(key)]); }

  // The key a call with these arguments dispatches to now (for a mode with a rule, its key).
  DispatchKey dispatch_key(const HopArgs& args) const;
  nn::Value operator()(HopArgs args) const;
  // Runs the kernel of `key` directly (a kernel redispatching below itself).
  nn::Value call_kernel(DispatchKey key, const HopArgs& args,
                        dispatch::ModePtr mode = nullptr) const;

 private:
  static std::size_t index(DispatchKey k) { return static_cast<std::size_t>(k); }
  std::string name_;
  std::array<Kernel, kNumDispatchKeys> kernels_;
  std::array<bool, kNumDispatchKeys> fallthrough_{};
};

// A generic mode that takes higher-order operators it has no rule for.
class HopMode : public dispatch::DispatchMode {
 public:
  bool supports_higher_order_operators() const override { return true; }
  virtual nn::Value handle_hop(const HigherOrderOperator& op, const HopArgs& args) = 0;
};

// Excludes a key on this thread while alive (upstream's _AutoDispatchBelowAutograd for Autograd).
class ExcludeKeyGuard {
 public:
  explicit ExcludeKeyGuard(DispatchKey key);
  ~ExcludeKeyGuard();
  ExcludeKeyGuard(const ExcludeKeyGuard&) = delete;
  ExcludeKeyGuard& operator=(const ExcludeKeyGuard&) = delete;

 private:
  DispatchKey key_;
  bool prev_;
};

// torch.ops.higher_order.<name>: the registered operator, or null.
const HigherOrderOperator* find_operator(const std::string& name);

// The dispatch key of a mode kind (Generic has none).
bool key_of_mode(dispatch::ModeKind kind, DispatchKey& key);

}  // namespace fsdp::ops
