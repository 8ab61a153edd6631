#include "fsdp/summon_full_params.h"

#include "core/autograd.h"
#include "core/error.h"
#include "fsdp/runtime.h"

namespace fsdp {

SummonFullParams::SummonFullParams(FullyShardedDataParallel& root, bool writeback, bool rank0_only,
                                   bool with_grads)
    : writeback_(writeback), kept_(!rank0_only || root.rank() == 0) {
  units_ = root.fsdp_units();
  // Upstream's _validate_unshard_params_args, in its order, before any unit is unsharded.
  for (auto* u : units_)
    FSDP_CHECK(!with_grads || !u->handle() || u->handle()->config().use_orig_params,
               NotImplementedError,
               "with_grads=True, use_orig_params=False, offload_to_cpu=False is not supported "
               "yet (unit '{}')",
               u->runtime().fqn());
  FSDP_CHECK(!(writeback && rank0_only), NotImplementedError,
             "writeback=True and rank0_only=True is not supported yet");
  const RootState& state = root.runtime().root_state();  // lazy init: the units know their tree
  FSDP_CHECK(!autograd::in_backward() && state.forward_depth == 0, AssertionError,
             "Cannot manually unshard parameters during forward/backward");
  for (auto* u : units_)
    FSDP_CHECK(!u->runtime().summoned(), AssertionError,
               "Cannot manually unshard parameters when already unsharding parameters (unit "
               "'{}' is inside summon_full_params already)",
               u->runtime().fqn());
  for (auto* u : units_) {
    auto* h = u->handle();
    if (h == nullptr) continue;
    u->runtime().unshard_now();
    Tensor full_grad;
    const Tensor g = h->flat_param().grad();
    if (with_grads && g.defined()) {
      if (h->sharded()) {
        full_grad = empty({h->layout().padded_numel}, TensorOptions(g.dtype(), g.device()));
        u->process_group()->all_gather(g.data_ptr(), full_grad.data_ptr(),
                                       static_cast<std::size_t>(h->layout().shard_numel), g.dtype(),
                                       g.device());
      } else {
        full_grad = g;
      }
    }
    if (kept_) {
      h->use_unsharded_param_views(full_grad);
      // Upstream's unflatten_as_params: the unit lists the original parameters, not its flat one.
      if (!h->exposed_views().empty())
        u->child(FullyShardedDataParallel::kWrappedModuleName)->remove_parameter("_flat_param");
    } else {
      u->runtime().reshard_now();
    }
  }
  for (auto* u : units_) u->runtime().set_summoned(true, rank0_only);
}

SummonFullParams::~SummonFullParams() {
  for (auto* u : units_) u->runtime().set_summoned(false, false);
  if (!kept_) return;
  for (auto it = units_.rbegin(); it != units_.rend(); ++it) {
    auto* h = (*it)->handle();
    if (h == nullptr) continue;
    if (!h->exposed_views().empty()) {
      h->hide_unsharded_param_views();
      (*it)
          ->child(FullyShardedDataParallel::kWrappedModuleName)
          ->register_parameter("_flat_param", h->flat_param(), h->requires_grad());
    }
    if (writeback_) h->write_back_unsharded();
    (*it)->runtime().reshard_now();
    h->use_sharded_grad_views();
  }
}

}  // namespace fsdp
