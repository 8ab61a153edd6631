// WrapperOptions: the typed, mergeable counterpart of the kwargs dict that PyTorch passes through
// its auto-wrap policies (docs/design.md decision 5). Policies copy and merge it (CustomPolicy
// overrides, wrap() call-site overrides, a module's own `_wrap_overrides`) without knowing what
// the fields mean; the wrapper (FSDP, or the planner's recording wrapper) interprets them.
//
// Every field is a Setting<T>: absent (the key is not in the dict), explicitly None, or a value.
// Python distinguishes the first two ({**a, **b} lets b's None win), and upstream relies on it:
// modules of the mixed-precision ignore classes get `mixed_precision=None`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/module.h"
#include "core/tensor.h"

// Policies pass process groups along without using them (the fsdp layer does), so they are only
// declared here: policies stays below comm (tests/check_layering.py).
namespace fsdp::comm {
class ProcessGroup;
struct HybridGroups;
}  // namespace fsdp::comm

namespace fsdp::policies {

// Throws KeyError for reading an absent or None setting.
[[noreturn]] void throw_missing(bool is_none);

// A kwarg: absent, explicitly None, or a value.
template <typename T>
class Setting {
 public:
  Setting() = default;                                                  // absent
  Setting(T value) : state_(State::Value), value_(std::move(value)) {}  // NOLINT: implicit
  // Anything that converts to T (a lambda for a ParamInitFn, a derived group's pointer), so that
  // `options.field = value` needs no spelled-out T.
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<U&&, T> &&
                                                    !std::is_same_v<std::decay_t<U>, T> &&
                                                    !std::is_same_v<std::decay_t<U>, Setting>>>
  Setting(U&& value) : Setting(T(std::forward<U>(value))) {}  // NOLINT: implicit
  static Setting none() {
    Setting s;
    s.state_ = State::None;
    return s;
  }

  bool is_set() const { return state_ != State::Absent; }  // present in the dict (None counts)
  bool is_none() const { return state_ == State::None; }
  bool has_value() const { return state_ == State::Value; }
  const T& value() const;  // throws KeyError when absent or None
  T& value();
  const T& operator*() const { return value(); }
  const T* operator->() const { return &value(); }
  // The value, or `fallback` when absent or None (Python's `x or default` for our types).
  T value_or(T fallback) const { return has_value() ? *value_ : std::move(fallback); }
  void reset() { *this = Setting(); }

  friend bool operator==(const Setting& a, const Setting& b) {
    if (a.state_ != b.state_) return false;
    return a.state_ != State::Value || *a.value_ == *b.value_;
  }

 private:
  enum class State { Absent, None, Value };
  State state_ = State::Absent;
  std::optional<T> value_;
};

enum class ShardingStrategy {
  FULL_SHARD,
  SHARD_GRAD_OP,
  NO_SHARD,
  HYBRID_SHARD,
  _HYBRID_SHARD_ZERO2
};
enum class BackwardPrefetch { BACKWARD_PRE, BACKWARD_POST };

std::string to_string(ShardingStrategy s);  // "ShardingStrategy.FULL_SHARD", as Python prints it
std::string to_string(BackwardPrefetch p);  // "BackwardPrefetch.BACKWARD_PRE"
// Streams as to_string (test frameworks print values this way).
inline std::ostream& operator<<(std::ostream& os, ShardingStrategy s) {
  return os << to_string(s);
}
bool is_hybrid(ShardingStrategy s);

// torch.distributed.fsdp.MixedPrecision with its defaults.
struct MixedPrecision {
  std::optional<DType> param_dtype;
  std::optional<DType> reduce_dtype;
  std::optional<DType> buffer_dtype;
  bool keep_low_precision_grads = false;
  bool cast_forward_inputs = false;
  bool cast_root_forward_inputs = true;
  // Modules of these classes are wrapped separately with mixed precision disabled.
  nn::ClassSet module_classes_to_ignore{"_BatchNorm"};

  friend bool operator==(const MixedPrecision&, const MixedPrecision&) = default;
  std::string str() const;
};

struct CPUOffload {
  bool offload_params = false;
  friend bool operator==(const CPUOffload&, const CPUOffload&) = default;
  std::string str() const;
};

// Upstream's param_init_fn: called by FSDP on each module of a unit whose parameters are on the
// meta device, after giving them storage. Copies share the callable, so options holding it
// compare by identity, like Python's function objects.
class ParamInitFn {
 public:
  ParamInitFn() = default;
  template <typename F, typename = std::enable_if_t<std::is_invocable_v<F&, nn::Module&> &&
                                                    !std::is_same_v<std::decay_t<F>, ParamInitFn>>>
  ParamInitFn(F fn)  // NOLINT: implicit, as a std::function
      : fn_(std::make_shared<const std::function<void(nn::Module&)>>(std::move(fn))) {}
  explicit operator bool() const { return fn_ && *fn_; }
  void operator()(nn::Module& module) const;  // TypeError when empty
  friend bool operator==(const ParamInitFn& a, const ParamInitFn& b) { return a.fn_ == b.fn_; }

 private:
  std::shared_ptr<const std::function<void(nn::Module&)>> fn_;
};

class Policy;
// A callable policy: (module, recurse, nonwrapped_numel) -> wrap/recurse decision.
using CallablePolicy =
    std::function<bool(nn::Module&, bool recurse, std::int64_t nonwrapped_numel)>;

// Either a callable policy (the `_recursive_wrap` engine) or a Policy object (`_run_policy` +
// post-order apply). Compared by identity, like Python objects.
class AutoWrapPolicy {
 public:
  AutoWrapPolicy() = default;
  AutoWrapPolicy(CallablePolicy fn);  // NOLINT: implicit
  // Any callable with the policy signature (a lambda, a function).
  template <typename F, typename = std::enable_if_t<
                            std::is_invocable_r_v<bool, F&, nn::Module&, bool, std::int64_t> &&
                            !std::is_same_v<std::decay_t<F>, CallablePolicy>>>
  AutoWrapPolicy(F fn) : AutoWrapPolicy(CallablePolicy(std::move(fn))) {}  // NOLINT: implicit
  AutoWrapPolicy(std::shared_ptr<const Policy> policy);                    // NOLINT: implicit
  // Pointer convertibility, not is_base_of: overload resolution asks it of incomplete types too
  // (a comm::ProcessGroup seen from policies), and only the former allows them.
  template <typename P, typename = std::enable_if_t<std::is_convertible_v<P*, const Policy*>>>
  AutoWrapPolicy(std::shared_ptr<P> policy)  // NOLINT: implicit
      : AutoWrapPolicy(std::shared_ptr<const Policy>(std::move(policy))) {}

  bool empty() const { return !callable_ && !policy_; }
  // The Policy object, or null for a plain callable.
  const std::shared_ptr<const Policy>& policy() const { return policy_; }
  // The callable form: the plain callable, or the policy's own callable form (ModuleWrapPolicy);
  // null when the policy object is not callable (CustomPolicy).
  CallablePolicy callable() const;
  std::string str() const;
  friend bool operator==(const AutoWrapPolicy& a, const AutoWrapPolicy& b) {
    return a.callable_ == b.callable_ && a.policy_ == b.policy_;
  }

 private:
  std::shared_ptr<const CallablePolicy> callable_;
  std::shared_ptr<const Policy> policy_;
};

// The FSDP constructor's keyword arguments (except `module`).
//
// Upstream's `process_group` takes a group or a (shard, replicate) tuple; here they are two typed
// fields that act as that one keyword: `process_group` for every strategy but the hybrid ones,
// `hybrid_process_groups` (comm::split_hybrid's pair) for HYBRID_SHARD and _HYBRID_SHARD_ZERO2.
// FSDP refuses options with both set; merged() takes both from `overrides` when it sets either.
struct WrapperOptions {
  Setting<std::shared_ptr<comm::ProcessGroup>> process_group;
  Setting<std::shared_ptr<const comm::HybridGroups>> hybrid_process_groups;
  Setting<ShardingStrategy> sharding_strategy;
  Setting<CPUOffload> cpu_offload;
  Setting<AutoWrapPolicy> auto_wrap_policy;
  Setting<BackwardPrefetch> backward_prefetch;
  Setting<MixedPrecision> mixed_precision;
  Setting<std::vector<nn::ModulePtr>> ignored_modules;
  Setting<Device> device_id;
  Setting<bool> sync_module_states;
  Setting<bool> forward_prefetch;
  Setting<bool> limit_all_gathers;
  Setting<bool> use_orig_params;
  Setting<std::vector<Tensor>> ignored_states;  // parameters (identity)
  Setting<ParamInitFn> param_init_fn;

  // Python's {**self, **overrides}: every field present in `overrides` (None included) wins.
  WrapperOptions merged(const WrapperOptions& overrides) const;
  // "WrapperOptions(sharding_strategy=ShardingStrategy.NO_SHARD, mixed_precision=None)": the
  // present fields, in declaration order.
  std::string str() const;
  friend bool operator==(const WrapperOptions& a, const WrapperOptions& b);
};

// --- Setting<T> out-of-line members
template <typename T>
const T& Setting<T>::value() const {
  if (state_ != State::Value) throw_missing(state_ == State::None);
  return *value_;
}
template <typename T>
T& Setting<T>::value() {
  if (state_ != State::Value) throw_missing(state_ == State::None);
  return *value_;
}
}  // namespace fsdp::policies
