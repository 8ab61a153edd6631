// Handle-level rules of the sharding strategies (upstream's _runtime_utils / _init_utils facts):
// which strategies shard, which free parameters after forward, the gradient divide factors, and
// what each unit's collectives move.
#pragma once

#include <cstdint>

#include "policies/options.h"

namespace fsdp {

using policies::ShardingStrategy;

// Every strategy but NO_SHARD cuts the flat parameter into per-rank shards.
bool is_sharded(ShardingStrategy s);
// FULL_SHARD and HYBRID_SHARD free the unsharded parameters after forward (except the root's);
// SHARD_GRAD_OP and _HYBRID_SHARD_ZERO2 keep them until after backward.
bool reshards_after_forward(ShardingStrategy s);
// Whether a unit frees its unsharded parameters after forward: by its strategy, except the root,
// which keeps them for backward (the runtime's post-forward, the planner's all-gathers per step
// and the memory bound all follow this).
bool frees_after_forward(ShardingStrategy s, bool is_root);

// Gradients are averaged over `world_size` ranks in two steps, before and after the reduction,
// to keep fp16 sums from overflowing or underflowing. Upstream's loop: f = 1; while
// world_size % f == 0 and world_size / f > f: f *= 2. pre = f, post = world_size / f
// (W=2: 2, 1; W=3: 2, 1.5; W=4: 2, 2; W=8: 4, 2).
struct DivideFactors {
  double pre = 1.0;
  double post = 1.0;
};
DivideFactors gradient_divide_factors(int world_size);

// The elements one unit's collectives move on one rank per call: an all-gather receives the
// padded flat parameter (sharded strategies); a gradient reduction contributes the padded
// gradient to a reduce-scatter (sharded) or the flat gradient to an all-reduce (NO_SHARD), and a
// hybrid strategy then all-reduces the shard over the replicas. The runtime counts their bytes
// as it issues them (FullyShardedDataParallel::comm_bytes) and fsdp-plan predicts them: both
// from here, each multiplying by the dtype's size in its own arithmetic (the planner's checked).
struct CollectiveElements {
  std::int64_t all_gather = 0;
  std::int64_t reduce_scatter = 0;
  std::int64_t all_reduce = 0;
};
CollectiveElements unit_collective_elements(bool sharded, bool replicated, std::int64_t flat_numel,
                                            std::int64_t padded_numel, std::int64_t shard_numel);

}  // namespace fsdp
