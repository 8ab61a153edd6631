// summon_full_params: while the guard lives, every unit of the root's tree is unsharded and its
// modules hold the full parameters (use_orig_params: the original Parameters, with full
// gradients when with_grads). On exit, writeback copies changes back into the shards, then the
// units are resharded. Upstream's rules: not during forward or backward; rank0_only excludes
// writeback; with_grads needs use_orig_params.
#pragma once

#include <vector>

#include "fsdp/fully_sharded_data_parallel.h"

namespace fsdp {

class SummonFullParams {
 public:
  explicit SummonFullParams(FullyShardedDataParallel& root, bool writeback = true,
                            bool rank0_only = false, bool with_grads = false);
  ~SummonFullParams();
  SummonFullParams(const SummonFullParams&) = delete;
  SummonFullParams& operator=(const SummonFullParams&) = delete;

 private:
  std::vector<FullyShardedDataParallel*> units_;
  bool writeback_;
  bool kept_;  // this rank holds the full parameters (false on ranks > 0 with rank0_only)
};

}  // namespace fsdp
