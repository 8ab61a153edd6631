// Handle-level rules of the sharding strategies (upstream's _runtime_utils / _init_utils facts):
// which strategies shard, which free parameters after forward, and the gradient divide factors.
#pragma once

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

}  // namespace fsdp
