#include "fsdp/fully_sharded_data_parallel.h"

#include <fmt/format.h>

#include <unordered_set>

#include "core/error.h"
#include "core/fqn.h"
#include "core/traversal/pre_order.h"
#include "core/traversal/unit_modules.h"
#include "core/traversal/wrapper_marker.h"
#include "core/warnings.h"
#include "fsdp/attribute_forwarding.h"
#include "fsdp/runtime.h"
#include "fsdp/unit_claims.h"
#include "policies/auto_wrap.h"
#include "policies/ignored.h"

namespace fsdp {

namespace {
constexpr const char* kClassName = "FullyShardedDataParallel";

// The groups this unit shards over (shard) and, for the hybrid strategies, replicates across.
comm::HybridGroups resolve_groups(const WrapperOptions& options, ShardingStrategy strategy) {
  const bool single = options.process_group.has_value();
  const bool hybrid = options.hybrid_process_groups.has_value();
  FSDP_CHECK(!(single && hybrid), ValueError,
             "WrapperOptions: set process_group or hybrid_process_groups, not both (they are "
             "upstream's one process_group argument)");
  if (!single && !hybrid)
    throw ValueError(
        "Default process group has not been initialized, please make sure to call "
        "init_process_group. (Pass the group as WrapperOptions::process_group, or "
        "WrapperOptions::hybrid_process_groups for the hybrid strategies.)");
  if (hybrid) {
    FSDP_CHECK(*options.hybrid_process_groups != nullptr && (*options.hybrid_process_groups)->shard,
               ValueError, "hybrid sharding: the shard group is None");
    return **options.hybrid_process_groups;
  }
  FSDP_CHECK(*options.process_group != nullptr, ValueError,
             "WrapperOptions::process_group is a null group");
  if (policies::is_hybrid(strategy))
    throw NotImplementedError(fmt::format(
        "{} with a single process group ({}): building the intra-/inter-node groups needs "
        "communication; pass WrapperOptions::hybrid_process_groups = "
        "std::make_shared<const comm::HybridGroups>(comm::split_hybrid(world, shard_size))",
        policies::to_string(strategy), (*options.process_group)->where()));
  return comm::HybridGroups{*options.process_group, nullptr};
}

// sync_module_states: rank 0's parameters and buffers of the unit's own modules (those of nested
// units were synced by them) are broadcast to every rank before flattening. Upstream requires GPU
// tensors here because it broadcasts over NCCL; our CPU tensors are compute tensors and every
// backend broadcasts them, so CPU modules are allowed.
void broadcast_module_states(const std::vector<std::pair<nn::Module*, std::string>>& modules,
                             const UnitConfig& unit) {
  std::vector<Tensor> tensors;
  for (const auto& [m, prefix] : modules) {
    for (const auto& [n, p] : m->parameter_slots()) tensors.push_back(p);
    for (const auto& [n, b] : m->buffer_slots()) tensors.push_back(b);
  }
  auto broadcast = [&](comm::ProcessGroup& g) {
    if (g.size() == 1) return;
    for (const auto& t : tensors) {
      if (!t.defined() || t.numel() == 0 || t.is_meta()) continue;
      FSDP_CHECK(t.is_contiguous(), ValueError,
                 "sync_module_states: a parameter or buffer of shape {} is not contiguous",
                 shape_str(t.shape()));
      g.broadcast(t.data_ptr(), static_cast<std::size_t>(t.numel()), t.dtype(), 0, t.device());
    }
  };
  broadcast(*unit.shard_group);
  if (unit.replicate_group) broadcast(*unit.replicate_group);
}

bool is_container(const nn::Module& m) {
  return m.isinstance("ModuleList") || m.isinstance("ModuleDict");
}
}  // namespace

FullyShardedDataParallel::FullyShardedDataParallel(nn::ModulePtr module, WrapperOptions options)
    : nn::Module(static_class()) {
  FSDP_CHECK(module != nullptr, TypeError, "FullyShardedDataParallel: module must not be None");
  // Errors about modules and parameters taken twice name them from the model being wrapped.
  NamingScope naming(*module);
  if (auto claim = UnitClaims::of_module(*module))
    throw ValueError(already_wrapped_message(*module, "", *claim));

  // Ignored modules (closed under descendants, plus nested units' own) and parameters.
  FSDP_CHECK(!(options.ignored_modules.has_value() && options.ignored_states.has_value()),
             ValueError,
             "Cannot pass both `ignored_modules` and `ignored_states` at the same time. Please "
             "just pass `ignored_states`.");
  ignored_modules_ = policies::close_ignored_modules(
      module, options.ignored_modules.value_or(std::vector<nn::ModulePtr>{}));
  std::vector<std::shared_ptr<FullyShardedDataParallel>> nested;
  for (const auto& sub : traversal::modules_of(module))
    if (auto unit = std::dynamic_pointer_cast<FullyShardedDataParallel>(sub))
      nested.push_back(unit);
  for (const auto& unit : nested)
    ignored_modules_.insert(unit->ignored_modules_.begin(), unit->ignored_modules_.end());
  ignored_params_ = policies::ignored_params_of(module, ignored_modules_);
  for (const auto& p : options.ignored_states.value_or(std::vector<Tensor>{}))
    ignored_params_.insert(p.impl());
  for (const auto& unit : nested)
    ignored_params_.insert(unit->ignored_params_.begin(), unit->ignored_params_.end());

  // Process group.
  const auto requested = options.sharding_strategy;  // absent or None means FULL_SHARD
  const comm::HybridGroups groups =
      resolve_groups(options, requested.value_or(ShardingStrategy::FULL_SHARD));
  process_group_ = groups.shard;
  rank_ = process_group_->rank();
  world_size_ = process_group_->size();

  // Auto-wrap the submodules; each child unit gets the root's options.
  if (options.auto_wrap_policy.has_value()) {
    WrapperOptions root;
    root.process_group = options.process_group;
    root.hybrid_process_groups = options.hybrid_process_groups;
    root.sharding_strategy =
        requested.has_value() ? requested : policies::Setting<ShardingStrategy>::none();
    root.cpu_offload =
        options.cpu_offload.is_set() ? options.cpu_offload : policies::Setting<CPUOffload>::none();
    root.backward_prefetch =
        options.backward_prefetch.is_set()
            ? options.backward_prefetch
            : policies::Setting<BackwardPrefetch>(BackwardPrefetch::BACKWARD_PRE);
    root.mixed_precision = options.mixed_precision.is_set()
                               ? options.mixed_precision
                               : policies::Setting<MixedPrecision>::none();
    root.device_id =
        options.device_id.is_set() ? options.device_id : policies::Setting<Device>::none();
    root.sync_module_states = options.sync_module_states.value_or(false);
    root.forward_prefetch = options.forward_prefetch.value_or(false);
    root.limit_all_gathers = options.limit_all_gathers.value_or(true);
    root.use_orig_params = options.use_orig_params.value_or(false);
    if (options.param_init_fn.has_value()) root.param_init_fn = options.param_init_fn;
    std::vector<Tensor> ignored_states;
    traversal::ParamSet listed;
    for (const auto& m : traversal::modules_of(module))
      for (const auto& [name, p] : m->parameter_slots())
        if (p.defined() && ignored_params_.count(p.impl()) && listed.insert(p.impl()).second)
          ignored_states.push_back(p);
    root.ignored_states = std::move(ignored_states);
    policies::auto_wrap(module, *options.auto_wrap_policy, ignored_modules_, ignored_params_,
                        std::move(root), wrapper_fn(), std::string(kClassName));
  }

  // Core state: a group of one rank has nothing to shard.
  if (world_size_ == 1) {
    if (!(requested.has_value() && *requested == ShardingStrategy::NO_SHARD))
      warn("FSDP is switching to use `NO_SHARD` instead of " +
           policies::to_string(requested.value_or(ShardingStrategy::FULL_SHARD)) +
           " since the world size is 1.");
    sharding_strategy_ = ShardingStrategy::NO_SHARD;
  } else {
    sharding_strategy_ = requested.value_or(ShardingStrategy::FULL_SHARD);
    if (sharding_strategy_ == ShardingStrategy::NO_SHARD)
      warn(
          "The `NO_SHARD` sharding strategy is deprecated. If having issues, please use "
          "`DistributedDataParallel` instead.",
          "FutureWarning");
  }
  mixed_precision_ = options.mixed_precision.value_or(MixedPrecision{});
  cpu_offload_ = options.cpu_offload.value_or(CPUOffload{});
  backward_prefetch_ = options.backward_prefetch.is_none()
                           ? std::nullopt
                           : std::optional<BackwardPrefetch>(options.backward_prefetch.value_or(
                                 BackwardPrefetch::BACKWARD_PRE));
  forward_prefetch_ = options.forward_prefetch.value_or(false);
  limit_all_gathers_ = options.limit_all_gathers.value_or(true);
  use_orig_params_ = options.use_orig_params.value_or(false);
  sync_module_states_ = options.sync_module_states.value_or(false);
  if (options.device_id.has_value()) device_id_ = *options.device_id;

  if (options.param_init_fn.has_value()) param_init_fn_ = *options.param_init_fn;
  replicate_group_ = groups.replicate;

  UnitConfig unit;
  unit.strategy = sharding_strategy_;
  unit.backward_prefetch = backward_prefetch_;
  unit.forward_prefetch = forward_prefetch_;
  unit.limit_all_gathers = limit_all_gathers_;
  unit.shard_group = process_group_;
  unit.replicate_group = replicate_group_;
  auto handle = init_flat_param(*module, unit);
  runtime_ = std::make_unique<UnitRuntime>(*this, std::move(unit), std::move(handle));
  // A container is never called; its unit runs around its modules instead. One whose modules
  // are all units (always_wrap_policy) holds nothing.
  if (is_container(*module) && runtime_->handle() != nullptr) {
    warn(fmt::format(
        "FSDP: {} has no forward, so its unit all-gathers all of its parameters around the "
        "forward of each of its modules (wrapping those modules as units gathers only each "
        "one's): {}",
        module->type_name(), module->repr()));
    runtime_->run_around_container_modules(*module, ignored_modules_);
  }
  register_module(kWrappedModuleName, std::move(module));
  traversal::mark_as_wrapper(*this, kClassName);
}

FullyShardedDataParallel::~FullyShardedDataParallel() = default;

Device FullyShardedDataParallel::meta_target() const {
  // Upstream materialises on device_id, else on the CPU.
  return device_id_ ? *device_id_ : kCPU;  // host by design: no device_id
}

ParamInitFn allocate_only() {
  static const ParamInitFn fn = [](nn::Module&) {};
  return fn;
}

void FullyShardedDataParallel::materialize_meta_modules(
    const std::vector<std::pair<nn::Module*, std::string>>& own_modules, bool params) {
  auto is_meta = [&](const Tensor& t) {
    return t.defined() && t.is_meta() && !ignored_params_.count(t.impl());
  };
  // Children before parents, siblings in order: the order in which constructors initialise (a
  // parent's reset_parameters may set a child's values, e.g. MultiheadAttention's out_proj.bias).
  std::unordered_set<const nn::Module*> own;
  for (const auto& [m, prefix] : own_modules) own.insert(m);
  std::vector<nn::Module*> post_order;
  std::vector<std::pair<nn::Module*, std::size_t>> stack;
  if (!own_modules.empty()) stack.emplace_back(own_modules.front().first, 0);
  while (!stack.empty()) {
    auto& [m, next] = stack.back();
    const auto& slots = m->child_slots();
    while (next < slots.size() && !(slots[next].second && own.count(slots[next].second.get())))
      ++next;
    if (next < slots.size()) {
      nn::Module* child = slots[next++].second.get();
      stack.emplace_back(child, 0);
      continue;
    }
    post_order.push_back(m);
    stack.pop_back();
  }
  for (nn::Module* m : post_order) {
    bool meta = false;
    for (const auto& [n, p] : m->parameter_slots()) meta = meta || is_meta(p);
    for (const auto& [n, b] : m->buffer_slots()) meta = meta || is_meta(b);
    if (!meta) continue;
    const Device target = meta_target();
    if (params) {
      m->to_empty(target, /*recurse=*/false);
    } else {
      for (const auto& [n, b] : m->buffer_slots())
        if (is_meta(b)) b.set_data(empty(b.shape(), TensorOptions(b.dtype(), target)));
    }
    if (param_init_fn_)
      param_init_fn_(*m);
    else
      m->reset_parameters();
  }
}

std::unique_ptr<FlatParamHandle> FullyShardedDataParallel::init_flat_param(nn::Module& module,
                                                                           const UnitConfig& unit) {
  // This unit's managed parameters: pre-order over the modules (with repeats, as upstream's
  // named_modules(remove_duplicate=False)), not descending into nested units; a parameter met
  // again is a shared parameter viewing the first occurrence.
  std::vector<FlatParamInfo> params;
  std::vector<SharedParamInfo> shared;
  std::unordered_map<const TensorImpl*, std::size_t> seen;
  // Nested units manage their own subtrees (their parameters are claimed: see below).
  const auto own_modules = traversal::unit_own_modules(module, ignored_modules_);
  for (const auto& [m, prefix] : own_modules)
    if (auto claim = UnitClaims::of_module(*m))
      throw ValueError(already_wrapped_message(module, prefix, *claim));
  // A parameter that another unit flattened (tied weights in two units) fails here, before
  // anything is changed.
  for (auto& [m, prefix] : own_modules)
    for (const auto& [name, p] : m->parameter_slots())
      if (p.defined() && !ignored_params_.count(p.impl()))
        if (auto claim = UnitClaims::of_parameter(p))
          throw ValueError(shared_parameter_message(module, join_fqn(prefix, name), *claim));
  // Meta-device parameters are materialised here, unit by unit: each rank holds one unit
  // unsharded at a time, then keeps only its shard. With allocate_only, every managed parameter
  // on meta and no broadcast to come, the flat buffer is their storage (no second copy).
  bool all_meta = true;
  for (const auto& [m, prefix] : own_modules)
    for (const auto& [name, p] : m->parameter_slots())
      if (p.defined() && !ignored_params_.count(p.impl())) all_meta = all_meta && p.is_meta();
  const bool flat_storage = all_meta && !sync_module_states_ && param_init_fn_ == allocate_only();
  materialize_meta_modules(own_modules, /*params=*/!flat_storage);
  if (sync_module_states_) broadcast_module_states(own_modules, unit);
  for (auto& [m, prefix] : own_modules) {
    for (const auto& [name, p] : m->parameter_slots()) {
      if (!p.defined() || ignored_params_.count(p.impl())) continue;
      const std::string fqn = join_fqn(prefix, name);
      auto [it, first] = seen.emplace(p.impl(), params.size());
      if (first)
        params.push_back({m, name, fqn, p.shape(), p});
      else
        shared.push_back({m, name, fqn, it->second});
    }
  }
  claims_ = std::make_unique<UnitClaims>(module);
  for (const auto& [m, prefix] : own_modules) claims_->claim_module(*m, prefix);
  for (const auto& p : params) claims_->claim_parameter(p.orig, p.fqn);
  if (params.empty()) return nullptr;
  FlatParamConfig cfg;
  cfg.strategy = sharding_strategy_;
  cfg.use_orig_params = use_orig_params_;
  cfg.rank = rank_;
  cfg.group_size = world_size_;
  cfg.param_dtype = mixed_precision_.param_dtype;
  cfg.reduce_dtype = mixed_precision_.reduce_dtype;
  cfg.keep_low_precision_grads = mixed_precision_.keep_low_precision_grads;
  cfg.offload_params = cpu_offload_.offload_params;
  if (flat_storage) cfg.materialize_meta_on = meta_target();
  auto handle = std::make_unique<FlatParamHandle>(std::move(params), std::move(shared), cfg,
                                                  module.type_name());
  if (!use_orig_params_)
    module.register_parameter("_flat_param", handle->flat_param(), handle->requires_grad());
  return handle;
}

FlatParamHandle* FullyShardedDataParallel::handle() const {
  return runtime_->handle();
}

std::vector<FullyShardedDataParallel*> FullyShardedDataParallel::fsdp_units() {
  std::vector<FullyShardedDataParallel*> units;
  for (const auto& [name, m] : traversal::named_units(*this))
    if (auto* u = dynamic_cast<FullyShardedDataParallel*>(m)) units.push_back(u);
  return units;
}

FullyShardedDataParallel::NoSyncGuard::NoSyncGuard(FullyShardedDataParallel& root)
    : root_(root), prev_(root.runtime().root_state().sync_gradients) {
  FSDP_CHECK(root.runtime().is_root(), RuntimeError,
             "no_sync() must be called on the root FSDP unit (unit '{}' is not the root)",
             root.runtime().fqn());
  root_.runtime().root_state().sync_gradients = false;
}

FullyShardedDataParallel::NoSyncGuard::~NoSyncGuard() {
  root_.runtime().root_state().sync_gradients = prev_;
}

const std::vector<RuntimeEvent>& FullyShardedDataParallel::runtime_events() {
  return runtime_->root_state().events;
}

void FullyShardedDataParallel::clear_runtime_events() {
  runtime_->root_state().events.clear();
}

double FullyShardedDataParallel::exposed_comm_seconds() {
  return runtime_->root_state().comm.blocked_seconds();
}

CommBytes FullyShardedDataParallel::comm_bytes() {
  return runtime_->root_state().comm.bytes;
}

void FullyShardedDataParallel::reset_comm_bytes() {
  runtime_->root_state().comm.bytes = {};
}

void FullyShardedDataParallel::reset_exposed_comm_seconds() {
  runtime_->root_state().comm.reset_blocked_seconds();
}

std::shared_ptr<FullyShardedDataParallel> FullyShardedDataParallel::make(nn::ModulePtr module,
                                                                         WrapperOptions options) {
  return std::make_shared<FullyShardedDataParallel>(std::move(module), std::move(options));
}

policies::WrapperFn FullyShardedDataParallel::wrapper_fn() {
  return [](nn::ModulePtr module, const WrapperOptions& options) -> nn::ModulePtr {
    return make(std::move(module), options);
  };
}

nn::Value FullyShardedDataParallel::forward(const nn::Args& args) {
  return runtime_->forward(*module(), args);
}

}  // namespace fsdp
