// The FSDP schedule (upstream's _runtime_utils): lazy root initialisation, pre-forward unshard
// and forward prefetch, post-forward reshard by strategy, pre-backward unshard from hooks on the
// unit's outputs and backward prefetch in the reverse of the recorded forward order,
// post-backward gradient reduction from the flat parameter's post-accumulate-grad hook, and the
// final callback that finishes the reductions, reshards what is left and sets the sharded
// gradients. Every unshard, reshard and reduction is recorded as a RuntimeEvent.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "core/module.h"
#include "core/traversal/module_sets.h"
#include "fsdp/comm_scheduler.h"
#include "fsdp/events.h"
#include "fsdp/flat_param.h"
#include "fsdp/streams.h"
#include "policies/options.h"

namespace fsdp {

class FullyShardedDataParallel;
struct RootState;

// What one unit's schedule needs to know, resolved from its options.
struct UnitConfig {
  ShardingStrategy strategy = ShardingStrategy::FULL_SHARD;
  std::optional<policies::BackwardPrefetch> backward_prefetch =
      policies::BackwardPrefetch::BACKWARD_PRE;
  bool forward_prefetch = false;
  bool limit_all_gathers = true;
  std::shared_ptr<comm::ProcessGroup> shard_group;
  std::shared_ptr<comm::ProcessGroup> replicate_group;  // HYBRID_SHARD only
};

class UnitRuntime {
 public:
  UnitRuntime(FullyShardedDataParallel& owner, UnitConfig config,
              std::unique_ptr<FlatParamHandle> handle);
  ~UnitRuntime();

  // The unit's forward: unshard, run `module`, reshard, register pre-backward hooks.
  nn::Value forward(nn::Module& module, const nn::Args& args);
  // A container's unit (ModuleList, ModuleDict: never called) runs this schedule around each
  // of the container's modules that is not a unit itself or ignored, through their forward
  // hooks, so that the parameters it holds are all-gathered when those modules run.
  void run_around_container_modules(nn::Module& container, const traversal::ModuleSet& ignored);

  const UnitConfig& config() const { return config_; }
  FlatParamHandle* handle() const { return handle_.get(); }
  bool is_root() const { return is_root_.value_or(false); }
  bool initialized() const { return state_ != nullptr; }
  const std::string& fqn() const { return fqn_; }
  // The shared state of this unit's tree (lazily initialising this unit as the root first).
  RootState& root_state();

  // Unshards now and stays unsharded until reshard_now() (summon_full_params, full state dicts).
  void unshard_now();
  void reshard_now();
  // summon_full_params holds this unit (upstream's SUMMON_FULL_PARAMS state): a forward, a
  // backward or a second summon of it is refused; full state dicts read it as it is.
  bool summoned() const { return summoned_; }
  bool summoned_rank0_only() const { return summoned_ && summoned_rank0_only_; }
  void set_summoned(bool summoned, bool rank0_only) {
    summoned_ = summoned;
    summoned_rank0_only_ = rank0_only;
  }

 private:
  friend struct RootState;
  void lazy_init();
  void pre_forward();
  // pre_forward, then the inputs cast for mixed precision (when they are) and the frozen
  // unit's reshard hook on them.
  std::optional<nn::Args> prepare_forward(const nn::Args& in);
  void post_forward(nn::Value& output);
  void pre_backward();
  void post_backward();
  void post_backward_reshard_only();
  void register_reshard_only_hook(const nn::Args& args);
  void unshard(bool prefetch, bool full_precision = false);
  // Where a unit may prefetch: after its forward's unshard (forward_prefetch), at its
  // pre-backward (BACKWARD_PRE), after its post-backward reshard (BACKWARD_POST).
  enum class PrefetchPoint { Forward, PreBackward, PostBackward };
  // Upstream's _get_handle_to_prefetch: the unit this configuration prefetches at `point`, or
  // null (no such mode, no recorded neighbour).
  UnitRuntime* handle_to_prefetch(PrefetchPoint point) const;
  // Upstream's _prefetch_handle: the one place that picks and issues a prefetch.
  void prefetch_handle(PrefetchPoint point);
  // Starts `next`'s all-gather unless it is unsharded, in flight or the rate limit is reached.
  void prefetch(UnitRuntime* next);
  // Mixed precision: the parameters are used in full precision now (eval with
  // FSDP_USE_FULL_PREC_IN_EVAL=1), and the dtype this unit's forward inputs are cast to.
  bool force_full_precision() const;
  std::optional<DType> forward_input_dtype() const;
  void cast_buffers_for_mode();
  // Marks "<unit> forward|backward" on the memory timeline this thread records into, if any.
  void mark_unit_event(const char* what) const;
  void reshard(bool record = true);
  // Waits for this unit's all-gather: the host on the cpu (timed), the compute stream on an
  // accelerator.
  void wait_for_all_gather(comm::Work& work);
  void register_post_backward_hook();

  FullyShardedDataParallel& owner_;
  UnitConfig config_;
  std::unique_ptr<FlatParamHandle> handle_;
  std::shared_ptr<RootState> state_;
  std::optional<bool> is_root_;
  std::string fqn_;
  bool pre_backward_done_ = false;
  bool post_backward_done_ = false;
  bool in_backward_ = false;
  bool summoned_ = false;
  bool summoned_rank0_only_ = false;
  bool post_backward_hook_registered_ = false;
  std::vector<HookHandle> container_hooks_;  // removed with the unit
};

// A buffer cast to its unit's MixedPrecision.buffer_dtype (it keeps its original dtype for
// state dicts and for eval in full precision).
struct MixedPrecisionBuffer {
  Tensor buffer;
  DType original;
  DType low;
};

// State shared by every unit of one root's tree (upstream shares it through the root's
// _lazy_init): the units, the recorded forward order, the collectives, the event log.
struct RootState {
  std::vector<UnitRuntime*> units;          // pre-order, the root first
  std::vector<UnitRuntime*> forward_order;  // units with parameters, as first run
  bool order_recorded = false;              // after the first iteration the order is fixed
  bool sync_gradients = true;               // false inside no_sync()
  bool final_callback_queued = false;
  int forward_depth = 0;  // unit forwards running (summon_full_params is refused in them)
  bool record_events = true;
  std::vector<RuntimeEvent> events;
  CommScheduler comm;
  std::vector<MixedPrecisionBuffer> mixed_precision_buffers;
  RootStreams streams;  // on the cpu: the cpu's one stream
  FreeEventQueue free_events;
  // Test hook (issue 24's seeded missing wait): the compute stream does not wait for the
  // all-gathers, which the stream sanitizer must report.
  bool skip_all_gather_wait = false;  // accelerators, limit_all_gathers

  void record(RuntimeEvent::Kind kind, const UnitRuntime& unit);
  // Position of `unit` in forward_order (-1 when absent).
  int order_index(const UnitRuntime* unit) const;
  // Units whose unsharded parameters are in use or in flight and will be freed in this pass
  // (upstream's rate limiter counts those).
  int unshards_in_flight(bool backward) const;
  void final_callback();
  // Frees every unit's unsharded parameters that are still held (none expected afterwards).
  void reshard_all();
  // A buffer as state dicts save it: in its original dtype when mixed precision cast it.
  Tensor buffer_for_state_dict(const Tensor& buffer) const;
};

}  // namespace fsdp
