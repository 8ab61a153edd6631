// Shared by the runtime tests: run ranks as threads, a small MLP with nested FSDP units, and the
// comparison of sharded training against the plain model on the whole batch.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "core/module.h"
#include "core/optim/optimizer.h"
#include "fsdp/fully_sharded_data_parallel.h"
#include "tests/support/test_device.h"

namespace fsdp::testing {

// Runs body on `world` ranks as threads, each with its threads-backend group.
void on_ranks(int world, const std::function<void(std::shared_ptr<comm::ProcessGroup>)>& body);

// Sequential(Linear(6,10), ReLU, Sequential(Linear(10,10), ReLU), Linear(10,4)) from `seed`.
nn::ModulePtr mlp(std::uint64_t seed);

struct RunOptions {
  ShardingStrategy strategy = ShardingStrategy::FULL_SHARD;
  bool use_orig_params = false;
  std::optional<BackwardPrefetch> backward_prefetch = BackwardPrefetch::BACKWARD_PRE;
  bool forward_prefetch = false;
  int node_size = 0;  // HYBRID: ranks per shard group
  std::string optimizer = "sgd";
  int steps = 4;
  std::int64_t batch = 3;  // rows per rank
  std::optional<MixedPrecision> mixed_precision;
  bool offload_params = false;
  // Each rank's model and batch on fake_cuda:rank (run_mlp). FSDP_TEST_DEVICE=fake_cuda makes it
  // the default, so that a whole suite runs on the test device (tests/fsdp/meson.build).
  bool on_fake_cuda = test_device_is_fake_cuda();
  // Every rank on cuda:0 (FSDP_TEST_DEVICE=cuda: the GPU machine's one GPU, shared).
  bool on_cuda = test_device_type() == DeviceType::CUDA;
  bool stream_sanitizer = false;      // each rank under StreamSanitizerMode (run_mlp)
  bool skip_all_gather_wait = false;  // the runtime's test hook (RootState) (run_mlp)
  // Each step as two micro-batches, the first under no_sync() (run_mlp, run_mlp_plain).
  bool no_sync_microbatch = false;
  // Activation checkpointing ("full": every Linear recomputed in backward) (run_mlp).
  std::string checkpoint_activations = "none";
};

// Wraps mlp(seed) as FSDP(root) with units for children "2" and "3" (manual nesting).
std::shared_ptr<FullyShardedDataParallel> wrap_mlp(const nn::ModulePtr& model,
                                                   const std::shared_ptr<comm::ProcessGroup>& pg,
                                                   const RunOptions& o);

struct RunResult {
  std::vector<double> losses;                                       // global mean per step
  std::vector<std::pair<std::string, std::vector<double>>> params;  // final, by FQN
};
// Trains the MLP sharded on `world` ranks (result of rank 0) or, with world 0, the plain model
// on the whole global batch of `world_for_batch` ranks.
RunResult run_mlp(int world, const RunOptions& o);
// The optimizers of the MLP tests: "adamw" (lr 0.01) or SGD (lr 0.1, momentum 0.9).
std::unique_ptr<optim::Optimizer> make_mlp_optimizer(const std::string& name,
                                                     std::vector<Tensor> params);
RunResult run_mlp_plain(int world_for_batch, const RunOptions& o);

}  // namespace fsdp::testing
