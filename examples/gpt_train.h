// One rank of the GPT training job (examples/train_gpt.cpp), as a function: the job, the tests
// (sharded against unsharded) and the benchmark all run exactly this loop.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "core/memory_category.h"
#include "examples/gpt.h"
#include "examples/job_model.h"
#include "examples/token_data.h"
#include "policies/options.h"

namespace fsdp::examples {

struct GPTTrainConfig {
  GPTConfig model;
  // The model trained: absent, train_gpt's GPT of `model` (gpt_job_model.h); finetune's Hugging
  // Face model otherwise.
  std::shared_ptr<const JobModel> job_model;
  std::int64_t batch = 8;  // sequences per rank per step
  int steps = 10;
  double lr = 1e-3;
  std::string optimizer = "adamw";     // "sgd" | "adamw"
  std::optional<double> weight_decay;  // absent: the optimizer's default (torch's: AdamW 0.01)
  std::uint64_t seed = 0;
  TokenData data;  // the training tokens (a text's bytes, or a token file's ids)
  // Where the model trains: cpu, or an accelerator (fake_cuda, the stream-ordered test device;
  // cuda). Without an index, rank r uses device r (torch's LOCAL_RANK convention). The weights
  // are initialised on the host and copied, so every device starts from the CPU's.
  Device device;
  // FSDP: absent = the plain (unsharded) model on this rank alone.
  std::optional<policies::ShardingStrategy> sharding = policies::ShardingStrategy::FULL_SHARD;
  std::string policy = "transformer([TransformerEncoderLayer])";  // fsdp-plan's grammar
  bool use_orig_params = false;
  bool forward_prefetch = false;
  // CPUOffload(offload_params=True): shards, their gradients and the optimizer on the host.
  bool cpu_offload = false;
  std::optional<policies::BackwardPrefetch> backward_prefetch =
      policies::BackwardPrefetch::BACKWARD_PRE;
  bool limit_all_gathers = true;
  int node_size = 0;          // HYBRID_SHARD: ranks per shard group (0: all ranks on one node)
  double clip_grad_norm = 0;  // > 0: clip the gradients' total norm to it every step
  // Activation checkpointing of the transformer blocks: "none", "full" or "selective".
  std::string checkpoint_activations = "none";
  // Mixed precision (FSDP only): parameters all-gathered and computed in this dtype (bfloat16 or
  // float16), gradients reduced in it, buffers kept in it; float32 shards for the optimizer.
  std::optional<DType> mixed_precision;
  std::string load_path;  // a full checkpoint (safetensors) loaded before training
  // The full checkpoint written after training (rank 0): a .safetensors file, or else a
  // directory in Hugging Face's layout, sharded above max_shard_bytes (fsdp/checkpoint_full.h).
  std::string save_path;
  std::int64_t max_shard_bytes = 5'000'000'000;
  // Resumable sharded checkpoints (fsdp/checkpoint.h): every save_every steps and after the last
  // step into checkpoint_dir (keep > 0: only the newest `keep`); resume_dir: continue from the
  // newest checkpoint there (to `steps` in total), at any world size and strategy.
  // Checkpoints record the job's identity (examples/gpt_checkpoint_checks.h) and a resume refuses
  // one that differs, except in the fields allow_changes names (--allow-change): "lr" (the
  // current lr replaces the saved one), "world-size" (another world size, the same global batch).
  // checkpoint_dir is locked for the job (fsdp/checkpoint_lock.h).
  std::string checkpoint_dir;
  int save_every = 0;
  int keep = 0;
  std::string resume_dir;
  std::set<std::string> allow_changes;
  // Called on rank 0 with each warning (a directory entry that is not a checkpoint, a stale lock
  // taken over).
  std::function<void(const std::string&)> on_warning;
  // Evaluation: mean loss over eval_batches global batches of eval_data, before and after.
  TokenData eval_data;
  int eval_batches = 0;
  // An SVG chart of one training step's memory by category (rank 0; the second step, when the
  // optimizer state exists), with the units' forward and backward marked.
  std::string memory_timeline;
  // A NaN or infinite loss stops the job at that step, before the optimizer step and before
  // anything is saved (a RuntimeError naming the step); true: train on regardless.
  bool allow_nonfinite = false;
  // Called on every rank after each step with (step, global mean loss).
  std::function<void(int, double)> on_step;
};

struct GPTTrainResult {
  std::vector<double> losses;  // per step, the mean over the global batch (equal on every rank)
  int first_step = 0;          // the step of losses[0] (> 0 after a resume)
  double seconds = 0;          // the training loop, without the first step
  const char* timed_by = "";   // "CUDA events" or "host clock" (examples/loop_clock.h)
  Device device;               // where this rank trained (cuda:r for --device cuda)
  double exposed_comm_seconds = 0;  // blocked in the runtime's collectives, without step 1
  std::int64_t peak_bytes = 0;      // this rank's peak allocated bytes
  // One step's memory (the second, or the only one): its peak, by category at that peak, and the
  // bound FSDP promises: own shards of parameters, gradients and optimizer state + the two
  // largest unsharded units + activations.
  std::int64_t step_peak_bytes = 0;
  std::array<std::int64_t, kNumMemoryCategories> step_peak_by_category{};
  std::int64_t memory_bound_bytes = 0;
  // Bytes this rank's unit collectives moved in the timed steps (all but the first; FSDP only).
  std::uint64_t all_gather_bytes = 0, reduce_bytes = 0;
  double eval_before = 0, eval_after = 0;
  std::int64_t num_parameters = 0;
};

// Runs the job on this rank of `group` (every rank must call it). With `sharding` absent the
// group must have one rank.
GPTTrainResult train_gpt(const GPTTrainConfig& config,
                         const std::shared_ptr<comm::ProcessGroup>& group);

}  // namespace fsdp::examples
