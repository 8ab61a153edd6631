// Sharded checkpoints: a directory per save, DIR/step-NNNNNNNN/, holding one safetensors file
// per rank for the model's pieces (model-rank-RRRRR.safetensors) and one for the optimizer's
// (optim-rank-RRRRR.safetensors), written in parallel without gathering, and index.json: per
// tensor its global shape, dtype and every saved piece (file, offset, numel); the optimizer's
// parameter groups; the training progress (step, data position, each rank's RNG state). Any
// world size reads it: each rank opens only the files holding elements it needs.
//
// Saves are atomic: everything is written under DIR/.tmp-step-NNNNNNNN/, files and directory
// fsynced, then renamed; a save killed at any point leaves the earlier checkpoints loadable
// (a leftover .tmp-* directory is ignored and removed by the next save).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "core/optim/optimizer.h"
#include "core/random.h"
#include "fsdp/fully_sharded_data_parallel.h"

namespace fsdp {

struct TrainingProgress {
  std::int64_t step = 0;              // optimizer steps done
  std::int64_t data_position = 0;     // the next batch's index in the data order
  std::vector<Generator::State> rng;  // per rank of the saving job, its default generator
};

struct CheckpointOptions {
  int keep = 0;  // > 0: after a save, keep only the newest `keep` checkpoints in the directory
  // Tests: called on rank 0 at each stage of a save ("tmp", "rank files", "index", "rename",
  // "pruned"), e.g. to kill the process there.
  std::function<void(const std::string&)> on_stage;
};

// Every rank of `world` calls it (the root's units must span `world`'s ranks). Returns the
// checkpoint's path. `progress.rng` is filled from each rank's default generator.
std::string save_sharded_checkpoint(const std::string& dir, FullyShardedDataParallel& root,
                                    const optim::Optimizer* optimizer,
                                    const TrainingProgress& progress, comm::ProcessGroup& world,
                                    const CheckpointOptions& options = {});

// The newest complete checkpoint in `dir` (the highest step-N with an index.json); none when
// there is none (or no such directory).
std::optional<std::string> latest_checkpoint(const std::string& dir);

// Loads the model (and the optimizer, when given) from the checkpoint at `path`, at any world
// size and strategy, and returns the saved progress (the caller restores the RNG states it
// needs from progress.rng). Errors name the file and the tensor.
TrainingProgress load_sharded_checkpoint(const std::string& path, FullyShardedDataParallel& root,
                                         optim::Optimizer* optimizer);

}  // namespace fsdp
