#include "policies/options.h"

#include <fmt/format.h>

#include "core/error.h"
#include "policies/policy.h"
#include "policies/sharding_strategy_names.h"

namespace fsdp::policies {

void throw_missing(bool is_none) {
  throw KeyError(is_none ? "wrapper option is None" : "wrapper option is not set");
}

std::string to_string(ShardingStrategy s) {
  return "ShardingStrategy." + strategy_name(s);
}

std::string to_string(BackwardPrefetch p) {
  return p == BackwardPrefetch::BACKWARD_PRE ? "BackwardPrefetch.BACKWARD_PRE"
                                             : "BackwardPrefetch.BACKWARD_POST";
}

bool is_hybrid(ShardingStrategy s) {
  return s == ShardingStrategy::HYBRID_SHARD || s == ShardingStrategy::_HYBRID_SHARD_ZERO2;
}

namespace {
std::string dtype_str(const std::optional<DType>& d) {
  return d ? "torch." + std::string(dtype_name(*d)) : "None";
}
const char* py_bool(bool b) {
  return b ? "True" : "False";
}
}  // namespace

std::string MixedPrecision::str() const {
  return fmt::format(
      "MixedPrecision(param_dtype={}, reduce_dtype={}, buffer_dtype={}, "
      "keep_low_precision_grads={}, cast_forward_inputs={}, cast_root_forward_inputs={}, "
      "_module_classes_to_ignore={})",
      dtype_str(param_dtype), dtype_str(reduce_dtype), dtype_str(buffer_dtype),
      py_bool(keep_low_precision_grads), py_bool(cast_forward_inputs),
      py_bool(cast_root_forward_inputs), module_classes_to_ignore.str());
}

std::string CPUOffload::str() const {
  return fmt::format("CPUOffload(offload_params={})", py_bool(offload_params));
}

void ParamInitFn::operator()(nn::Module& module) const {
  if (!*this)
    throw TypeError(
        fmt::format("param_init_fn is empty: no function to call on {}", module.type_name()));
  (*fn_)(module);
}

AutoWrapPolicy::AutoWrapPolicy(CallablePolicy fn) {
  if (fn) callable_ = std::make_shared<const CallablePolicy>(std::move(fn));
}

AutoWrapPolicy::AutoWrapPolicy(std::shared_ptr<const Policy> policy) : policy_(std::move(policy)) {}

CallablePolicy AutoWrapPolicy::callable() const {
  if (callable_) return *callable_;
  if (policy_) return policy_->as_callable();
  return nullptr;
}

std::string AutoWrapPolicy::str() const {
  if (policy_) return policy_->repr();
  if (callable_) return fmt::format("<function at {}>", static_cast<const void*>(callable_.get()));
  return "None";
}

namespace {
template <typename T, typename Fn>
void append_field(std::string& out, const char* name, const Setting<T>& s, Fn&& show) {
  if (!s.is_set()) return;
  if (out.size() > 1) out += ", ";
  out += name;
  out += '=';
  out += s.is_none() ? std::string("None") : show(*s);
}

template <typename T>
void merge_field(Setting<T>& dst, const Setting<T>& src) {
  if (src.is_set()) dst = src;
}

// Applies `fn(name, member pointer)` to every field, in declaration order: one list serves
// merging, printing and comparing.
template <typename Fn>
void for_each_field(Fn&& fn) {
  fn("process_group", &WrapperOptions::process_group);
  fn("hybrid_process_groups", &WrapperOptions::hybrid_process_groups);
  fn("sharding_strategy", &WrapperOptions::sharding_strategy);
  fn("cpu_offload", &WrapperOptions::cpu_offload);
  fn("auto_wrap_policy", &WrapperOptions::auto_wrap_policy);
  fn("backward_prefetch", &WrapperOptions::backward_prefetch);
  fn("mixed_precision", &WrapperOptions::mixed_precision);
  fn("ignored_modules", &WrapperOptions::ignored_modules);
  fn("device_id", &WrapperOptions::device_id);
  fn("sync_module_states", &WrapperOptions::sync_module_states);
  fn("forward_prefetch", &WrapperOptions::forward_prefetch);
  fn("limit_all_gathers", &WrapperOptions::limit_all_gathers);
  fn("use_orig_params", &WrapperOptions::use_orig_params);
  fn("ignored_states", &WrapperOptions::ignored_states);
  fn("param_init_fn", &WrapperOptions::param_init_fn);
}

// Policies cannot ask a group its rank (comm is above them): the address tells groups apart.
std::string show(const std::shared_ptr<comm::ProcessGroup>& g) {
  return g ? fmt::format("<ProcessGroup at {}>", static_cast<const void*>(g.get())) : "None";
}
std::string show(const std::shared_ptr<const comm::HybridGroups>& g) {
  return g ? fmt::format("<HybridGroups at {}>", static_cast<const void*>(g.get())) : "None";
}
std::string show(const ParamInitFn& fn) {
  return fn ? "<function>" : "None";
}
std::string show(ShardingStrategy s) {
  return to_string(s);
}
std::string show(BackwardPrefetch p) {
  return to_string(p);
}
std::string show(const CPUOffload& c) {
  return c.str();
}
std::string show(const MixedPrecision& m) {
  return m.str();
}
std::string show(const AutoWrapPolicy& p) {
  return p.str();
}
std::string show(const Device& d) {
  return "device(type='" + d.str() + "')";
}
std::string show(bool b) {
  return py_bool(b);
}
std::string show(const std::vector<nn::ModulePtr>& ms) {
  std::string s = "[";
  for (std::size_t i = 0; i < ms.size(); ++i) s += (i ? ", " : "") + ms[i]->type_name() + "(...)";
  return s + "]";
}
std::string show(const std::vector<Tensor>& ts) {
  return fmt::format("[{} parameter(s)]", ts.size());
}

bool same(const std::vector<nn::ModulePtr>& a, const std::vector<nn::ModulePtr>& b) {
  return a == b;  // shared_ptr equality: identity
}
bool same(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].impl() != b[i].impl()) return false;
  return true;
}
template <typename T>
bool same(const T& a, const T& b) {
  return a == b;
}
template <typename T>
bool same_setting(const Setting<T>& a, const Setting<T>& b) {
  if (a.is_set() != b.is_set() || a.is_none() != b.is_none()) return false;
  return !a.has_value() || same(*a, *b);
}
}  // namespace

WrapperOptions WrapperOptions::merged(const WrapperOptions& overrides) const {
  WrapperOptions out = *this;
  for_each_field([&](const char*, auto member) { merge_field(out.*member, overrides.*member); });
  // The two group fields are upstream's one `process_group` keyword: an override of either
  // replaces both.
  if (overrides.process_group.is_set() || overrides.hybrid_process_groups.is_set()) {
    out.process_group = overrides.process_group;
    out.hybrid_process_groups = overrides.hybrid_process_groups;
  }
  return out;
}

std::string WrapperOptions::str() const {
  std::string out = "(";
  for_each_field([&](const char* name, auto member) {
    append_field(out, name, this->*member, [](const auto& v) { return show(v); });
  });
  return "WrapperOptions" + out + ")";
}

bool operator==(const WrapperOptions& a, const WrapperOptions& b) {
  bool eq = true;
  for_each_field([&](const char*, auto member) { eq = eq && same_setting(a.*member, b.*member); });
  return eq;
}

}  // namespace fsdp::policies
