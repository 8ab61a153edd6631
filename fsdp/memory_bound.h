// FSDP's per-rank memory bound, written once for fsdp-plan's prediction and train_gpt's check of
// the measured step peak: the shards a rank holds for the whole step, the unsharded parameters
// it holds at most at once, and the activations.
#pragma once

#include <cstdint>
#include <vector>

#include "policies/options.h"

namespace fsdp {

// One unit's unsharded parameters (their bytes in the dtype the forward uses) and what decides
// how long they live.
struct UnshardedUnit {
  std::int64_t bytes = 0;
  policies::ShardingStrategy strategy = policies::ShardingStrategy::FULL_SHARD;
  bool is_root = false;
};

// The most unsharded parameter bytes held at once: every unit that keeps its parameters from
// forward to backward (the root, and strategies that do not reshard after forward) plus the two
// largest of the others (the current unit and the prefetched next one: the rate limiter allows
// two all-gathers in flight). Throws fsdp::ValueError when a sum overflows int64.
std::int64_t peak_unsharded_bytes(const std::vector<UnshardedUnit>& units);

// The bound: `shard_bytes` (what the caller holds for the step: its shards of parameters,
// gradients and optimizer state) + `peak_unsharded` + `activation_bytes`. Throws
// fsdp::ValueError when the sum overflows int64.
std::int64_t memory_bound_bytes(std::int64_t shard_bytes, std::int64_t peak_unsharded,
                                std::int64_t activation_bytes);

}  // namespace fsdp
