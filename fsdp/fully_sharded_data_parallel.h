// FullyShardedDataParallel as a module type: upstream's constructor semantics that need no
// communication — options and their defaults, auto-wrapping the submodules, holding the wrapped
// module as `_fsdp_wrapped_module`, rank/world size from the process group, the world-size-1
// switch to NO_SHARD, forward passing through to the wrapped module.
//
// Not here yet: flattening parameters into a FlatParameter, sharding, unshard/reshard around
// forward and backward, gradient reduction and state dicts. They come with the FSDP runtime
// issue; until then a unit owns its module's parameters unchanged and nothing is sharded.
//
// C++ spelling of Python's attribute forwarding: `fsdp.bn1` is getattr(fsdp, "bn1") and
// `fsdp[0]` is getitem(fsdp, 0) (fsdp/attribute_forwarding.h); `fsdp.module` is module().
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "comm/process_group.h"
#include "core/module.h"
#include "core/traversal/module_sets.h"
#include "policies/options.h"
#include "policies/wrapper_fn.h"

namespace fsdp {

using policies::BackwardPrefetch;
using policies::CPUOffload;
using policies::MixedPrecision;
using policies::ShardingStrategy;
using policies::WrapperOptions;

// The options value holding a process group (policies only pass it along).
policies::OpaqueHandle process_group_handle(std::shared_ptr<comm::ProcessGroup> group);
// For HYBRID_SHARD / _HYBRID_SHARD_ZERO2: the (shard, replicate) pair, as upstream's tuple.
policies::OpaqueHandle process_group_handle(comm::HybridGroups groups);

class FullyShardedDataParallel : public nn::Module {
 public:
  FSDP_MODULE_CLASS(FullyShardedDataParallel, nn::Module)
  static constexpr const char* kWrappedModuleName = "_fsdp_wrapped_module";

  // `options.process_group` is required (there is no default group); `auto_wrap_policy`, when
  // set, wraps submodules first, each with these options (auto_wrap_policy cleared).
  FullyShardedDataParallel(nn::ModulePtr module, WrapperOptions options = {});
  static std::shared_ptr<FullyShardedDataParallel> make(nn::ModulePtr module,
                                                        WrapperOptions options = {});
  // The constructor as a wrapper function, for auto_wrap and enable_wrap.
  static policies::WrapperFn wrapper_fn();

  const nn::ModulePtr& module() const { return child(kWrappedModuleName); }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::shared_ptr<comm::ProcessGroup>& process_group() const { return process_group_; }
  const policies::OpaqueHandle& process_group_option() const { return process_group_option_; }
  ShardingStrategy sharding_strategy() const { return sharding_strategy_; }
  std::optional<BackwardPrefetch> backward_prefetch() const { return backward_prefetch_; }
  bool forward_prefetch() const { return forward_prefetch_; }
  bool limit_all_gathers() const { return limit_all_gathers_; }
  bool use_orig_params() const { return use_orig_params_; }
  bool sync_module_states() const { return sync_module_states_; }
  // `mixed_precision or MixedPrecision()`, as upstream's attribute.
  const MixedPrecision& mixed_precision() const { return mixed_precision_; }
  const CPUOffload& cpu_offload() const { return cpu_offload_; }
  const std::optional<Device>& device_id() const { return device_id_; }
  const traversal::ModuleSet& ignored_modules() const { return ignored_modules_; }
  const traversal::ParamSet& ignored_params() const { return ignored_params_; }

  // Runs the wrapped module (the unshard/reshard around it comes with the FSDP runtime).
  nn::Value forward(const nn::Args& args) override;

 private:
  std::shared_ptr<comm::ProcessGroup> process_group_;
  policies::OpaqueHandle process_group_option_;
  int rank_ = 0;
  int world_size_ = 1;
  ShardingStrategy sharding_strategy_ = ShardingStrategy::FULL_SHARD;
  std::optional<BackwardPrefetch> backward_prefetch_ = BackwardPrefetch::BACKWARD_PRE;
  bool forward_prefetch_ = false;
  bool limit_all_gathers_ = true;
  bool use_orig_params_ = false;
  bool sync_module_states_ = false;
  MixedPrecision mixed_precision_;
  CPUOffload cpu_offload_;
  std::optional<Device> device_id_;
  traversal::ModuleSet ignored_modules_;
  traversal::ParamSet ignored_params_;
};

using FSDP = FullyShardedDataParallel;

}  // namespace fsdp
