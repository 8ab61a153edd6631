#include "fsdp/sharding.h"

namespace fsdp {

bool is_sharded(ShardingStrategy s) {
  return s != ShardingStrategy::NO_SHARD;
}

bool reshards_after_forward(ShardingStrategy s) {
  return s == ShardingStrategy::FULL_SHARD || s == ShardingStrategy::HYBRID_SHARD;
}

bool frees_after_forward(ShardingStrategy s, bool is_root) {
  return !is_root && reshards_after_forward(s);
}

DivideFactors gradient_divide_factors(int world_size) {
  int factor = 1;
  while (world_size % factor == 0 && world_size / factor > factor) factor *= 2;
  DivideFactors f;
  f.pre = static_cast<double>(factor);
  f.post = static_cast<double>(world_size) / factor;
  return f;
}

CollectiveElements unit_collective_elements(bool sharded, bool replicated, std::int64_t flat_numel,
                                            std::int64_t padded_numel, std::int64_t shard_numel) {
  CollectiveElements e;
  if (sharded) {
    e.all_gather = padded_numel;
    e.reduce_scatter = padded_numel;
    if (replicated) e.all_reduce = shard_numel;
  } else {
    e.all_reduce = flat_numel;
  }
  return e;
}

}  // namespace fsdp
