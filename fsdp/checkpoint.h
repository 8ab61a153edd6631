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
//
// Verified: every piece's XXH3-64 checksum is in index.json and in its file's header, the index
// has a checksum of its own, and it records the identity of the job that wrote it
// (fsdp/checkpoint_job.h). Only a directory named step-NNNNNNNN with a verified index whose step
// matches the name counts as a checkpoint: anything else in DIR is reported as ignored and never
// pruned. Format 1 (before checksums) is refused with a message naming it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "core/optim/optimizer.h"
#include "core/random.h"
#include "fsdp/checkpoint_job.h"
#include "fsdp/fully_sharded_data_parallel.h"

namespace fsdp {

struct TrainingProgress {
  std::int64_t step = 0;              // optimizer steps done
  std::int64_t data_position = 0;     // the next batch's index in the data order
  std::vector<Generator::State> rng;  // per rank of the saving job, its default generator
};

struct CheckpointOptions {
  int keep = 0;     // > 0: after a save, keep only the newest `keep` checkpoints in the directory
  JobIdentity job;  // recorded in the index (read_checkpoint_job)
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

// The name of step `step`'s checkpoint in its directory: step-NNNNNNNN.
std::string checkpoint_name(std::int64_t step);

// What a checkpoint directory holds.
struct CheckpointDirScan {
  std::vector<std::string> checkpoints;  // paths of the verified checkpoints, oldest first
  // Every other entry but the lock file and leftovers of interrupted saves: (path, why).
  std::vector<std::pair<std::string, std::string>> ignored;
};
// Nothing when `dir` does not exist; ValueError when it is not a directory.
CheckpointDirScan scan_checkpoint_dir(const std::string& dir);

// The newest verified checkpoint in `dir` (scan_checkpoint_dir's last); none when there is none
// (or no such directory).
std::optional<std::string> latest_checkpoint(const std::string& dir);

// The identity of the job that wrote the checkpoint at `path` (its verified index).
JobIdentity read_checkpoint_job(const std::string& path);

// Loads the model (and the optimizer, when given) from the checkpoint at `path`, at any world
// size and strategy, and returns the saved progress (the caller restores the RNG states it
// needs from progress.rng). Errors name the file and the tensor.
TrainingProgress load_sharded_checkpoint(const std::string& path, FullyShardedDataParallel& root,
                                         optim::Optimizer* optimizer);

}  // namespace fsdp
