// clip_grad_norm_ over a sharded model: the total norm of the unsharded model's gradients (each
// element counted once: sharded gradients are summed over the shard group, replicated NO_SHARD
// gradients are not; an ignored module's gradients count as this rank's own, as upstream's), and
// every gradient scaled by max_norm / (total + 1e-6) when that is < 1.
#pragma once

#include "fsdp/fully_sharded_data_parallel.h"

namespace fsdp {

// norm_type 2 (default) or any p >= 1, or infinity. Every rank must call it. Returns the total
// norm (the same on every rank).
double clip_grad_norm_(FullyShardedDataParallel& root, double max_norm, double norm_type = 2.0);

}  // namespace fsdp
