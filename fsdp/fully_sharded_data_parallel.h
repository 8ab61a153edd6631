// FullyShardedDataParallel: one FSDP unit. Construction follows upstream: options and their
// defaults, ignored modules and parameters, auto-wrapping the submodules (each becomes a unit of
// its own), the world-size-1 switch to NO_SHARD, then flattening this unit's managed parameters
// into one FlatParameter sharded over the process group (fsdp/flat_param.h). Calling the unit
// runs the schedule of fsdp/runtime.h around the wrapped module.
//
// C++ spelling of Python's attribute forwarding: `fsdp.bn1` is getattr(fsdp, "bn1") and
// `fsdp[0]` is getitem(fsdp, 0) (fsdp/attribute_forwarding.h); `fsdp.module` is module().
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "comm/process_group.h"
#include "core/module.h"
#include "core/traversal/module_sets.h"
#include "fsdp/events.h"
#include "policies/options.h"
#include "policies/wrapper_fn.h"

namespace fsdp {

class FlatParamHandle;
class UnitClaims;
class UnitRuntime;
struct UnitConfig;
using policies::BackwardPrefetch;
using policies::CPUOffload;
using policies::MixedPrecision;
using policies::ShardingStrategy;
using policies::WrapperOptions;

// param_init_fn for WrapperOptions: called on each module of a unit whose parameters are on the
// meta device, after they were given (uninitialised) storage; it initialises that module's own
// parameters and buffers.
using policies::ParamInitFn;

// A param_init_fn for a model built on the meta device whose values come from elsewhere (a
// file: load_sharded_from): FSDP gives each unit's meta parameters their storage as views of the
// unit's flat buffer (zeros) and initialises nothing, so that a rank holds one unit unsharded at
// a time during construction, not its parameters and their flat copy. Meta buffers get
// uninitialised storage. Every call returns the same function (FSDP recognises it).
ParamInitFn allocate_only();

class FullyShardedDataParallel : public nn::Module {
 public:
  ~FullyShardedDataParallel() override;
  FSDP_MODULE_CLASS(FullyShardedDataParallel, nn::Module)
  static constexpr const char* kWrappedModuleName = "_fsdp_wrapped_module";

  // `options.process_group` (or, for the hybrid strategies, `options.hybrid_process_groups`) is
  // required: there is no default group. `auto_wrap_policy`, when set, wraps submodules first,
  // each with these options (auto_wrap_policy cleared).
  FullyShardedDataParallel(nn::ModulePtr module, WrapperOptions options = {});
  static std::shared_ptr<FullyShardedDataParallel> make(nn::ModulePtr module,
                                                        WrapperOptions options = {});
  // The constructor as a wrapper function, for auto_wrap and enable_wrap.
  static policies::WrapperFn wrapper_fn();

  const nn::ModulePtr& module() const { return child(kWrappedModuleName); }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::shared_ptr<comm::ProcessGroup>& process_group() const { return process_group_; }
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
  // Where meta-device parameters and buffers get their storage: device_id, else the CPU.
  Device meta_target() const;
  const traversal::ModuleSet& ignored_modules() const { return ignored_modules_; }
  const traversal::ParamSet& ignored_params() const { return ignored_params_; }

  // Runs the wrapped module between this unit's unshard and reshard (fsdp/runtime.h).
  nn::Value forward(const nn::Args& args) override;

  // --- the runtime
  // This unit's FlatParameter handle (null when the unit manages no parameters).
  FlatParamHandle* handle() const;
  UnitRuntime& runtime() { return *runtime_; }
  // The replicate group of HYBRID_SHARD (null otherwise).
  const std::shared_ptr<comm::ProcessGroup>& replicate_group() const { return replicate_group_; }
  // Every unit of this root's tree, pre-order (this one first).
  std::vector<FullyShardedDataParallel*> fsdp_units();

  // While the guard lives, backward accumulates unreduced gradients locally (upstream's
  // no_sync()); the first backward after it reduces everything accumulated.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(FullyShardedDataParallel& root);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    FullyShardedDataParallel& root_;
    bool prev_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // The events of the schedule since the last clear (Unshard/Prefetch/Reshard/ReduceGrad).
  const std::vector<RuntimeEvent>& runtime_events();
  void clear_runtime_events();
  // Seconds this rank was blocked waiting for the runtime's collectives since the last reset.
  double exposed_comm_seconds();
  void reset_exposed_comm_seconds();
  // Bytes this rank's unit collectives moved since the first forward (mixed precision halves
  // them).
  CommBytes comm_bytes();
  void reset_comm_bytes();

 private:
  std::unique_ptr<FlatParamHandle> init_flat_param(nn::Module& module, const UnitConfig& unit);
  // Gives the unit's meta parameters and buffers storage and initialises them; with
  // `params` false only the buffers (the flat buffer becomes the parameters' storage).
  void materialize_meta_modules(const std::vector<std::pair<nn::Module*, std::string>>& own_modules,
                                bool params);
  ParamInitFn param_init_fn_;
  std::unique_ptr<UnitClaims> claims_;  // the modules and parameters this unit took
  std::unique_ptr<UnitRuntime> runtime_;
  std::shared_ptr<comm::ProcessGroup> replicate_group_;
  std::shared_ptr<comm::ProcessGroup> process_group_;
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
