#include "fsdp/clip_grad_norm.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/error.h"
#include "core/nn/clip_grad.h"
#include "core/ops.h"
#include "fsdp/flat_param.h"
#include "fsdp/param_shards.h"
#include "fsdp/runtime.h"

namespace fsdp {

double clip_grad_norm_(FullyShardedDataParallel& root, double max_norm, double norm_type) {
  FSDP_CHECK(root.runtime().root_state().units.front() == &root.runtime(), RuntimeError,
             "clip_grad_norm_ should only be called on the root FSDP instance");
  FSDP_CHECK(norm_type >= 1.0, ValueError, "clip_grad_norm_: norm_type must be >= 1 or inf, got {}",
             norm_type);
  const bool inf = std::isinf(norm_type);
  autograd::NoGradGuard no_grad;
  // Each rank's share of the norm: sharded gradients are summed over the shard group below;
  // NO_SHARD gradients are whole on every rank and counted once, and so are the gradients of
  // parameters no unit manages (an ignored module's: this rank's own, as upstream counts them).
  std::vector<Tensor> sharded_grads, replicated_grads, grads;
  bool any_sharded = false;
  for (auto* unit : root.fsdp_units()) {
    auto* h = unit->handle();
    if (h == nullptr) continue;
    any_sharded = any_sharded || h->sharded();
    if (!h->flat_param().grad().defined()) continue;
    grads.push_back(h->flat_param().grad());
    auto& share = h->sharded() ? sharded_grads : replicated_grads;
    // use_orig_params lets frozen parameters share a unit with trainable ones: their part of the
    // flat gradient is no gradient of theirs (upstream sums the original parameters' gradients).
    const auto& params = h->params();
    if (std::all_of(params.begin(), params.end(),
                    [](const FlatParamInfo& p) { return p.orig.requires_grad(); })) {
      share.push_back(grads.back());
      continue;
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
      const ShardParamInfo info = h->shard_info(i);
      if (params[i].orig.requires_grad() && info.in_shard)
        share.push_back(grads.back().narrow(0, info.offset_in_shard, info.numel_in_shard));
    }
  }
  for (const auto& [fqn, p] : unmanaged_params(root)) {
    if (!p.grad().defined()) continue;
    grads.push_back(p.grad());
    replicated_grads.push_back(grads.back());
  }
  double sharded = nn::norm_partial(sharded_grads, norm_type);
  const double replicated = nn::norm_partial(replicated_grads, norm_type);
  // Upstream reduces only when some unit is sharded (otherwise torch's clip_grad_norm_ over the
  // local parameters); the infinity norm is the largest over the ranks of both parts.
  auto& group = *root.process_group();
  const bool reduce = any_sharded && group.size() > 1;
  double total;
  if (inf) {
    total = std::max(sharded, replicated);
    if (reduce) group.all_reduce(&total, 1, DType::Float64, comm::ReduceOp::Max);
  } else {
    if (reduce) group.all_reduce(&sharded, 1, DType::Float64, comm::ReduceOp::Sum);
    total = std::pow(sharded + replicated, 1.0 / norm_type);
  }
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0)
    for (auto& g : grads) mul_(g, coef);
  return total;
}

}  // namespace fsdp
