#include "examples/train_gpt_options.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cmath>

namespace fsdp::examples {

TrainGptOptions parse_train_gpt_options(int argc, const char* const* argv) {
  CLI::App app{"Train a byte-level GPT with FSDP (fsdp-cpp)"};
  TrainGptOptions o;
  app.add_option("--layers", o.cfg.model.layers, "transformer blocks")->capture_default_str();
  app.add_option("--d-model", o.cfg.model.d_model, "model width")->capture_default_str();
  app.add_option("--heads", o.cfg.model.heads, "attention heads")->capture_default_str();
  app.add_option("--seq", o.cfg.model.seq, "bytes per sequence (T)")->capture_default_str();
  app.add_option("--batch", o.cfg.batch, "sequences per rank per step")->capture_default_str();
  app.add_option("--steps", o.cfg.steps, "optimizer steps")->capture_default_str();
  app.add_option("--lr", o.cfg.lr, "learning rate")->capture_default_str();
  app.add_option("--optimizer", o.cfg.optimizer, "sgd | adamw")->capture_default_str();
  app.add_option("--seed", o.cfg.seed, "initialisation seed")->capture_default_str();
  app.add_option("--data", o.data_path, "training bytes (a file)")->required();
  app.add_option("--eval-data", o.eval_path, "held-out bytes: loss before and after training");
  app.add_option("--eval-batches", o.cfg.eval_batches, "global batches of --eval-data")
      ->capture_default_str();
  app.add_option("--backend", o.backend, "threads | mpi | gloo | nccl")->capture_default_str();
  app.add_option("--ranks", o.ranks, "ranks (threads backend)")->capture_default_str();
  app.add_option("--sharding", o.sharding,
                 "FULL_SHARD | SHARD_GRAD_OP | NO_SHARD | HYBRID_SHARD | _HYBRID_SHARD_ZERO2 | "
                 "none")
      ->capture_default_str();
  app.add_option("--node-size", o.cfg.node_size, "HYBRID_SHARD: ranks per shard group");
  app.add_option("--policy", o.cfg.policy, "auto-wrap policy (fsdp-plan's grammar)")
      ->capture_default_str();
  app.add_flag("--use-orig-params", o.cfg.use_orig_params, "keep the original parameters");
  app.add_flag("--forward-prefetch", o.cfg.forward_prefetch, "prefetch the next unit in forward");
  app.add_option("--backward-prefetch", o.prefetch, "pre | post | none")->capture_default_str();
  app.add_option("--clip-grad-norm", o.cfg.clip_grad_norm, "clip the total gradient norm");
  app.add_option("--mixed-precision", o.mixed_precision,
                 "all-gather and compute in bf16 or fp16 (float32 shards for the optimizer, "
                 "gradients reduced in the same dtype): bf16 | fp16 | none")
      ->capture_default_str();
  app.add_option("--memory-timeline", o.cfg.memory_timeline,
                 "write an SVG chart of one step's memory by category (rank 0) to FILE");
  app.add_option("--checkpoint-activations", o.cfg.checkpoint_activations,
                 "activation checkpointing of the blocks: none | full | selective")
      ->capture_default_str();
  app.add_option("--save", o.cfg.save_path,
                 "write the full checkpoint at the end: FILE.safetensors, or a directory in "
                 "Hugging Face's layout (model.safetensors, sharded above --max-shard-size)");
  app.add_option("--max-shard-size", o.cfg.max_shard_bytes,
                 "--save DIR: bytes per file of the sharded layout")
      ->capture_default_str();
  app.add_option("--load", o.cfg.load_path,
                 "start from a full checkpoint (a .safetensors file or a --save directory)");
  app.add_option("--checkpoint-dir", o.cfg.checkpoint_dir,
                 "write resumable sharded checkpoints (model, optimizer, progress) here");
  app.add_option("--save-every", o.cfg.save_every,
                 "with --checkpoint-dir: save every K steps (and after the last)");
  app.add_option("--keep", o.cfg.keep, "with --checkpoint-dir: keep only the newest N checkpoints");
  app.add_option("--resume", o.cfg.resume_dir,
                 "continue from the newest checkpoint in DIR (to --steps in total)");
  app.add_option("--export-model", o.export_path,
                 "write the model as an fsdp-model/1 file for fsdp-plan (built on meta)");
  app.add_option("--log-every", o.log_every, "print every K steps")->capture_default_str();
  app.add_option("--threads-per-rank", o.threads_per_rank, "BLAS threads per rank")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    o.help = app.help();
    return o;
  } catch (const CLI::ParseError& e) {  // what CLI11_PARSE prints, with its exit status
    throw UsageError(CLI::FailureMessage::simple(&app, e), e.get_exit_code());
  }
  return o;
}

void check_train_gpt_options(const TrainGptOptions& o) {
  FSDP_CHECK(o.log_every >= 1, ValueError, "--log-every must be >= 1, got {}", o.log_every);
  FSDP_CHECK(o.cfg.steps >= 0, ValueError, "--steps must be >= 0, got {}", o.cfg.steps);
  FSDP_CHECK(o.cfg.batch >= 1, ValueError, "--batch must be >= 1, got {}", o.cfg.batch);
  FSDP_CHECK(o.ranks >= 1, ValueError, "--ranks must be >= 1, got {}", o.ranks);
  FSDP_CHECK(o.cfg.model.layers >= 0 && o.cfg.model.d_model >= 1 && o.cfg.model.heads >= 1 &&
                 o.cfg.model.seq >= 1,
             ValueError, "--layers/--d-model/--heads/--seq must be positive");
  FSDP_CHECK(std::isfinite(o.cfg.lr) && o.cfg.lr >= 0, ValueError,
             "--lr must be finite and >= 0, got {}", o.cfg.lr);
  FSDP_CHECK(o.threads_per_rank >= 1, ValueError, "--threads-per-rank must be >= 1");
  FSDP_CHECK(o.cfg.save_every >= 0 && o.cfg.keep >= 0, ValueError,
             "--save-every and --keep must be >= 0");
}

std::optional<policies::ShardingStrategy> parse_sharding(const std::string& s) {
  using policies::ShardingStrategy;
  if (s == "none") return std::nullopt;
  for (auto v :
       {ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP, ShardingStrategy::NO_SHARD,
        ShardingStrategy::HYBRID_SHARD, ShardingStrategy::_HYBRID_SHARD_ZERO2})
    if (s == policies::to_string(v) || "ShardingStrategy." + s == policies::to_string(v)) return v;
  throw ValueError(
      fmt::format("--sharding: unknown strategy '{}'; choose FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, "
                  "HYBRID_SHARD, _HYBRID_SHARD_ZERO2 or none (the unsharded model, one rank)",
                  s));
}

std::optional<policies::BackwardPrefetch> parse_prefetch(const std::string& s) {
  if (s == "pre") return policies::BackwardPrefetch::BACKWARD_PRE;
  if (s == "post") return policies::BackwardPrefetch::BACKWARD_POST;
  FSDP_CHECK(s == "none", ValueError, "--backward-prefetch: '{}' is not pre, post or none", s);
  return std::nullopt;
}

std::optional<DType> parse_mixed_precision(const std::string& s) {
  if (s == "bf16" || s == "bfloat16") return DType::BFloat16;
  if (s == "fp16" || s == "float16") return DType::Float16;
  FSDP_CHECK(s == "none", ValueError, "--mixed-precision: '{}' is not bf16, fp16 or none", s);
  return std::nullopt;
}

}  // namespace fsdp::examples
