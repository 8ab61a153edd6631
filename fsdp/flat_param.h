// One unit's FlatParameter and its handle (upstream's FlatParamHandle): the original parameters
// of the unit flattened into one buffer laid out by flat_param_layout, this rank's shard of it,
// the unsharded buffer that all-gathers fill before use and that is freed after, the views that
// the unit's modules compute with, and the gradient's path from the unsharded flat gradient to
// the sharded one.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "comm/work.h"
#include "core/module.h"
#include "core/stream.h"
#include "fsdp/flat_param_layout.h"
#include "fsdp/sharding.h"
#include "fsdp/streams.h"

namespace fsdp {

// An original parameter managed by a unit: the module slot that held it.
struct FlatParamInfo {
  nn::Module* module = nullptr;
  std::string name;  // the slot in `module`
  std::string fqn;   // from the unit's wrapped module, e.g. "self_attn.in_proj_weight"
  Shape shape;
  Tensor orig;  // the original Parameter (kept: use_orig_params exposes it)
};

// A later occurrence of a parameter already flattened (tied weights): it views the same elements.
struct SharedParamInfo {
  nn::Module* module = nullptr;
  std::string name;
  std::string fqn;
  std::size_t primary = 0;  // index into params()
};

struct FlatParamConfig {
  ShardingStrategy strategy = ShardingStrategy::FULL_SHARD;
  bool use_orig_params = false;
  int rank = 0;        // in the shard group
  int group_size = 1;  // the shard group's size
  // Mixed precision, as the unit's MixedPrecision: param_dtype is the dtype the parameters are
  // all-gathered and computed in (the shard stays in their own dtype: the optimizer's master
  // weights); reduce_dtype the dtype gradients are reduced in (param_dtype when only that is
  // given); keep_low_precision_grads leaves the reduced gradient in param_dtype.
  std::optional<DType> param_dtype;
  std::optional<DType> reduce_dtype;
  bool keep_low_precision_grads = false;
  // Meta parameters given storage here, on this device, as views of the unsharded flat buffer
  // (zeros): FSDP's allocate-only meta init, so that the unit is never held twice (parameters
  // plus their flat copy). Unset: meta parameters give a meta flat parameter.
  std::optional<Device> materialize_meta_on;
  // CPUOffload(offload_params=True) on an accelerator: the shard and its reduced gradient live in
  // host memory (the optimizer steps there); each unshard stages the shard on the compute
  // device, each reduction's result comes back to the host. Ignored on the cpu (nothing to move).
  bool offload_params = false;
};

class FlatParamHandle {
 public:
  // Flattens `params` (uniform floating dtype, one device), shards the buffer and points the
  // module slots at views of it (use_orig_params=false: plain tensor attributes; true: the
  // original Parameters, now 1-D views of this rank's shard). The unsharded buffer is freed.
  FlatParamHandle(std::vector<FlatParamInfo> params, std::vector<SharedParamInfo> shared,
                  const FlatParamConfig& config, const std::string& unit_name);

  const FlatParamLayout& layout() const { return layout_; }
  const FlatParamConfig& config() const { return config_; }
  const std::vector<FlatParamInfo>& params() const { return params_; }
  const std::vector<SharedParamInfo>& shared_params() const { return shared_; }
  // The FlatParameter (a leaf requiring grad when the parameters do).
  const Tensor& flat_param() const { return flat_param_; }
  // This rank's shard [shard_numel] (for NO_SHARD the whole flat buffer).
  const Tensor& local_shard() const { return local_shard_; }
  // The compute device: where the unsharded parameters, the collectives and the unsharded
  // gradient live (the shard's own device unless it is offloaded to the host).
  Device device() const { return compute_device_; }
  bool offloads_params() const { return offload_; }
  DType dtype() const { return dtype_; }
  // The dtype of the unsharded parameters in forward and backward, and of gradient reduction.
  DType compute_dtype() const { return compute_dtype_; }
  DType reduce_dtype() const { return reduce_dtype_; }
  bool uses_param_mixed_precision() const { return compute_dtype_ != dtype_; }
  bool sharded() const { return layout_.sharded; }
  // Whether using the parameters needs an unshard: sharded, a low-precision copy to make, or
  // the shard to bring from the host.
  bool needs_unshard() const { return sharded() || uses_param_mixed_precision() || offload_; }
  bool requires_grad() const { return requires_grad_; }

  // --- unshard / reshard
  // Unsharded (or in flight) in any precision.
  bool is_unsharded() const { return !needs_unshard() || unsharded_; }
  bool unshard_in_flight() const { return pending_unshard_ != nullptr; }
  // Unsharded (or in flight) in the precision asked for: full precision is the parameters' own
  // dtype (summon_full_params, state dicts, eval under FSDP_USE_FULL_PREC_IN_EVAL=1), otherwise
  // the compute dtype.
  bool is_unsharded_in(bool full_precision) const;
  bool unshard_in_flight_in(bool full_precision) const;
  // Allocates the unsharded buffer and starts the all-gather on `group` (no-op if unsharded in
  // that precision; unsharded in the other one, it reshards first). Mixed precision: the shard
  // is cast to the compute dtype first, so the all-gather moves 16-bit elements. On an
  // accelerator (`streams`): the cast on the pre-unshard stream, the buffer and the all-gather on
  // the unshard stream (fsdp/streams.h).
  void unshard_async(comm::ProcessGroup& group, bool full_precision = false,
                     const RootStreams* streams = nullptr);
  // Waits for an all-gather in flight (through `wait` when given, e.g. to time it); afterwards
  // the unsharded buffer holds the parameters.
  void wait_unshard(const std::function<void(comm::Work&)>& wait = nullptr);
  // Points the flat parameter at the unsharded buffer (it must be unsharded).
  void use_unsharded_flat_param();
  // Puts views of the unsharded flat parameter into the module slots; they carry autograd
  // through the FlatParameter when grad mode is on.
  void use_unsharded_views();
  // Backward (it must be unsharded): the module slots hold the forward's unsharded views again,
  // so that a recomputation (activation checkpointing) computes with the unsharded parameters
  // as the forward did. use_orig_params only: otherwise the slots kept those views throughout.
  void use_forward_views_in_backward();
  // Frees the unsharded buffer and points the flat parameter back at the shard.
  void reshard();
  // Accelerators: the unsharded buffer is in use on `stream` (the compute stream), so that a
  // reshard's free waits for that work before the block is reused (upstream's record_stream in
  // _free_unsharded_flat_param).
  void record_unsharded_use(const Stream& stream);
  // use_orig_params: the module slots hold the original Parameters again, as views of the
  // shard (1-D, possibly empty; the original shape for NO_SHARD). A no-op otherwise.
  void use_sharded_views();

  // summon_full_params: the module slots hold the unsharded values (use_orig_params: the
  // original Parameters themselves, viewing the unsharded buffer, with `full_grad` [padded]
  // giving their .grad when defined). No autograd.
  // Without use_orig_params the views become the modules' parameters (upstream's
  // unflatten_as_params: named_parameters() gives the original names) until
  // hide_unsharded_param_views() makes them plain attributes again.
  void use_unsharded_param_views(const Tensor& full_grad);
  void hide_unsharded_param_views();
  // The views use_unsharded_param_views registered as parameters (none with use_orig_params).
  const std::vector<Tensor>& exposed_views() const { return exposed_; }
  // Copies this rank's part of the unsharded buffer back into its shard (writeback).
  void write_back_unsharded();
  // Offloaded to pinned memory, the copies to the device read the shard when they run: the host
  // waits for the last one before it writes the shard (the optimizer after backward, loads,
  // writeback), as upstream synchronises at the end of backward.
  void wait_for_shard_reads() const;
  // Offloaded: waits for the reduced gradient's copy to the host and adds it to the kept one.
  void land_offloaded_grad();
  // The unsharded padded flat buffer in use (it must be unsharded).
  const Tensor& unsharded_padded() const;

  // --- gradients
  // Before backward: a sharded gradient left from an earlier backward is kept aside (and
  // accumulated into after the reduction); an unsharded one (no_sync) stays to accumulate into.
  void prepare_gradient_for_backward();
  // After AccumulateGrad: the unsharded flat gradient to reduce (the flat parameter's .grad is
  // cleared).
  Tensor take_unsharded_grad();
  // Adds a reduced gradient shard [shard_numel] (any floating dtype: it is cast to the
  // gradient's dtype, the parameters' own unless keep_low_precision_grads) to the gradient kept
  // from earlier backwards.
  void accumulate_reduced_grad(const Tensor& shard_grad);
  // End of backward. Synced: the flat parameter's .grad (and, use_orig_params, the original
  // parameters' .grad as views of it) is the reduced sharded gradient. Under no_sync(): the
  // unreduced gradient stays in .grad for the next backward to accumulate into.
  void finalize_gradients(bool synced);
  // Accelerators: the reduced gradient, made on the post-backward stream, is used on `stream`
  // (the compute stream: the optimizer), so that its free waits for that work.
  void record_reduced_grad_use(const Stream& stream);
  // use_orig_params: the original parameters' .grad are views of the flat (sharded) gradient.
  void use_sharded_grad_views();

  // Replaces this rank's shard with the matching part of full (unflattened) values, by
  // parameter index: the load path of a full state dict.
  void load_full_param(std::size_t param, const Tensor& full);
  // This rank's piece of parameter `param` (layout().shard_info at this rank): a 1-D view of
  // the shard (empty when the piece is), and its replacement by `values` (the same numel): the
  // save and load paths of a sharded state dict.
  ShardParamInfo shard_info(std::size_t param) const {
    return layout_.shard_info(param, config_.rank);
  }
  Tensor shard_piece(std::size_t param) const;
  void load_shard_piece(std::size_t param, const Tensor& values);

 private:
  void set_module_tensor(nn::Module& m, const std::string& name, const Tensor& t, bool as_param);
  std::string unit_name_;
  FlatParamConfig config_;
  std::vector<FlatParamInfo> params_;
  std::vector<SharedParamInfo> shared_;
  FlatParamLayout layout_;
  DType dtype_ = DType::Float32;
  DType compute_dtype_ = DType::Float32;
  DType reduce_dtype_ = DType::Float32;
  bool requires_grad_ = true;
  Device compute_device_;  // set by the constructor
  bool offload_ = false;
  Event shard_read_;     // after the last copy of the offloaded shard to the device
  Tensor grad_staging_;  // offloaded: pinned host buffer the reduced gradient is copied into
  Event grad_copied_;    // after that copy
  bool grad_in_flight_ = false;
  // The unsharded buffer is not the shard itself: sharded, or NO_SHARD with the shard offloaded.
  bool separate_unsharded_buffer() const { return layout_.sharded || offload_; }
  Tensor flat_param_;
  Tensor local_shard_;
  std::shared_ptr<Storage> full_storage_;  // the unsharded buffer, resized to 0 when freed
  Tensor full_padded_;                     // [padded_numel] over full_storage_, compute dtype
  // Mixed precision and sharded: the unsharded buffer in the parameters' own dtype.
  std::shared_ptr<Storage> full_prec_storage_;
  Tensor full_prec_padded_;
  bool unsharded_ = false;
  bool unsharded_low_ = false;  // the unsharded values are in the compute dtype (mixed precision)
  std::shared_ptr<comm::Work> pending_unshard_;
  // The shard cast to the compute dtype and/or staged on the compute device (offload), alive
  // while its all-gather runs.
  Tensor mp_shard_;
  Tensor saved_grad_shard_;
  bool unreduced_grad_kept_ = false;
  std::vector<Tensor> views_;    // the last unsharded views (index = params_)
  std::vector<Tensor> exposed_;  // summon_full_params' views as parameters (index = params_)
};

}  // namespace fsdp
