#include "examples/train_gpt_options.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "core/builtin_devices.h"
#include "core/io/safetensors_dir.h"
#include "core/kernels/kernel_table.h"
#include "core/stream.h"
#include "examples/cli_checks.h"
#include "examples/gpt_checkpoint_checks.h"
#include "policies/policy_expr.h"
#include "policies/sharding_strategy_names.h"

namespace fsdp::examples {

namespace {

// --- Checkpoint options (issue 22): paths that are given are not empty; the combinations. ---

CLI::Validator non_empty_path() {
  return CLI::Validator(
      [](std::string& s) { return s.empty() ? std::string("expected a path, got ''") : ""; },
      "PATH");
}

// A size as transformers' max_shard_size takes it ("5GB", "500MB", "2GiB", plain bytes;
// io::parse_size), at least one byte.
CLI::Validator byte_size() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        try {
          if (io::parse_size(s) >= 1) return "";
          return fmt::format("expected a size of at least 1 byte, got '{}'", s);
        } catch (const ValueError& e) {
          return e.what();
        }
      },
      "SIZE");
}

// A byte count as the help shows it: "5GB" for whole gigabytes, else bytes.
std::string size_text(std::int64_t bytes) {
  return bytes % 1'000'000'000 == 0 ? fmt::format("{}GB", bytes / 1'000'000'000)
                                    : fmt::format("{}", bytes);
}

// Why the checkpoint options cannot run together, or "".
std::string checkpoint_combination_error(TrainGptOptions& o) {
  auto& cfg = o.cfg;
  cfg.allow_changes = {o.allow_change.begin(), o.allow_change.end()};
  if (!cfg.load_path.empty() && !cfg.resume_dir.empty())
    return "--load and --resume both give the starting weights: --resume continues a run "
           "(model, optimizer, progress), --load starts one from full weights; give one";
  if (!cfg.allow_changes.empty() && cfg.resume_dir.empty()) return "--allow-change is for --resume";
  return "";
}

// --- The other options. ---

// The first option given that only FSDP acts on (which --sharding none would ignore), or null.
const char* fsdp_only_flag_given(const TrainGptOptions& o) {
  if (o.cfg.mixed_precision) return "--mixed-precision";
  if (o.cfg.use_orig_params) return "--use-orig-params";
  if (o.cfg.forward_prefetch) return "--forward-prefetch";
  if (o.cfg.cpu_offload) return "--cpu-offload";
  if (o.backward_prefetch_given && o.prefetch != "none") return "--backward-prefetch";
  return nullptr;
}

// Why --device cannot run (an unknown name, meta, a device this build has no kernels for, a
// backend that moves host memory only), or ""; sets `device`.
std::string device_error(const std::string& name, const std::string& backend, Device& device) {
  try {
    device = Device::parse(name);
  } catch (const ValueError&) {
    return fmt::format(
        "--device {}: unknown device (expected cpu, fake_cuda, fake_cuda:N, cuda "
        "or cuda:N)",
        name);
  }
  if (device.is_meta())
    return "--device meta: meta tensors have shapes and no values, so nothing can train on them";
  // A device is usable once its kernel table is: cuda's comes with issue 25.
  if (!has_kernels(device))
    return device.is_cuda()
               ? fmt::format(
                     "--device {}: training on CUDA is not available yet (this build has "
                     "no CUDA kernel table); use --device cpu, or fake_cuda to run the "
                     "GPU code paths on the CPU",
                     name)
               : fmt::format("--device {}: {}", name, missing_device_reason(device));
  // A device the machine lacks (cuda:3 on a one-GPU machine, cuda without a GPU), named now.
  if (device.is_accelerator()) {
    try {
      device_synchronize(device);
    } catch (const std::exception& e) {
      return fmt::format("--device {}: {}", name, e.what());
    }
  }
  // NCCL moves CUDA memory only (a process per GPU, under mpirun); threads moves either;
  // gloo and mpi move host memory only.
  if (backend == "nccl" && !device.is_cuda())
    return fmt::format(
        "--backend nccl needs --device cuda or cuda:N (NCCL moves CUDA memory only), got "
        "--device {}",
        name);
  if (device.is_accelerator() && backend != "threads" && !(backend == "nccl" && device.is_cuda()))
    return fmt::format(
        "--device {} needs --backend threads (the {} backend moves host memory "
        "only)",
        name, backend);
  return "";
}

// Why the options cannot run together, or "".
std::string combination_error(TrainGptOptions& o) {
  auto& cfg = o.cfg;
  const auto& m = cfg.model;
  if (o.data_path.empty() && !o.synthetic_tokens)
    return o.program == "train_gpt"
               ? "--data is required: the training text (bytes), or with --vocab other than 256 "
                 "an llm.c token file; or --synthetic-tokens"
               : "--data is required";
  if (!o.data_path.empty() && o.synthetic_tokens)
    return "--data and --synthetic-tokens both give the training tokens: give one";
  if (o.program == "train_gpt" && m.d_model % m.heads != 0)
    return fmt::format(
        "--d-model {} is not a multiple of --heads {} (each head gets d_model / heads "
        "dimensions)",
        m.d_model, m.heads);
  cfg.sharding = parse_sharding(o.sharding);
  cfg.backward_prefetch = parse_prefetch(o.prefetch);
  cfg.mixed_precision = parse_mixed_precision(o.mixed_precision);
  if (std::string why = device_error(o.device, o.backend, cfg.device); !why.empty()) return why;
  if (!cfg.policy.empty()) policies::parse_policy(cfg.policy);  // an InputError names the place
  // --steps 0 only writes: the model file, the initial weights, or the held-out loss.
  if (cfg.steps == 0 && o.export_path.empty() && cfg.save_path.empty() && cfg.eval_batches == 0)
    return o.program == "train_gpt"
               ? "--steps 0 trains nothing: give --steps 1 or more, or --export-model FILE, "
                 "--save PATH or --eval-data FILE --eval-batches N to only export, save or "
                 "evaluate the initial model"
               : "--steps 0 trains nothing: give --steps 1 or more, or --save DIR or --eval-data "
                 "FILE --eval-batches N to only save or evaluate the model";
  if (o.backend != "threads" && o.ranks_given)
    return fmt::format(
        "--ranks is for the threads backend; with --backend {} the launcher's ranks are used "
        "(mpirun -np N, or RANK/WORLD_SIZE)",
        o.backend);
  const int world = o.backend == "threads" ? o.ranks : 0;  // 0: the launcher's, known later
  if (!cfg.sharding && world > 1)
    return fmt::format(
        "--sharding none runs the unsharded model on one rank, got --ranks {} (use --ranks 1 "
        "or a sharding strategy)",
        world);
  // fake_cuda's collectives wait on its streams' workers: thread ranks on one fake_cuda device
  // would wait for each other there (CUDA's ranks share a GPU; fake_cuda gives each its own).
  if (world > 1 && cfg.device.is_fake_cuda() && cfg.device.index >= 0)
    return fmt::format(
        "--device {} puts every thread rank on one fake_cuda device, which it cannot share; "
        "use --device fake_cuda (rank r on fake_cuda:r)",
        o.device);
  if (!cfg.sharding)
    if (const char* flag = fsdp_only_flag_given(o))
      return fmt::format("{} is FSDP's: it needs --sharding other than none", flag);
  if (!cfg.sharding && (!cfg.checkpoint_dir.empty() || !cfg.resume_dir.empty()))
    return "--checkpoint-dir and --resume need FSDP (--sharding other than none)";
  if (o.node_size_given && !(cfg.sharding && policies::is_hybrid(*cfg.sharding)))
    return fmt::format("--node-size is for HYBRID_SHARD and _HYBRID_SHARD_ZERO2, not {}",
                       o.sharding);
  if (o.node_size_given && world > 0 && world % cfg.node_size != 0)
    return fmt::format("--node-size {} does not divide --ranks {}: {} shards within whole nodes",
                       cfg.node_size, world, o.sharding);
  if ((cfg.save_every > 0 || cfg.keep > 0) && cfg.checkpoint_dir.empty())
    return "--save-every and --keep are for --checkpoint-dir";
  if (cfg.eval_batches > 0 && o.eval_path.empty()) return "--eval-batches needs --eval-data";
  return checkpoint_combination_error(o);
}

// The model's options: train_gpt's GPT by its sizes.
void add_gpt_model_options(CLI::App& app, TrainGptOptions& a) {
  auto& cfg = a.cfg;
  // Every size has a range: a zero or negative size is refused with the option's name.
  app.add_option("--layers", cfg.model.layers, "transformer blocks")
      ->capture_default_str()
      ->check(int_range(1, 1024));
  app.add_option("--d-model", cfg.model.d_model, "model width")
      ->capture_default_str()
      ->check(int_range(1, 65536));
  app.add_option("--heads", cfg.model.heads, "attention heads")
      ->capture_default_str()
      ->check(int_range(1, 65536));
  app.add_option("--seq", cfg.model.seq, "tokens per sequence (T)")
      ->capture_default_str()
      ->check(int_range(1, 65536));
  app.add_option("--vocab", cfg.model.vocab,
                 "token ids the model embeds (V): 256 reads --data as bytes; any other V reads "
                 "llm.c token files (ids below V)")
      ->capture_default_str()
      ->check(int_range(1, std::int64_t{1} << 30));
  app.add_flag("--synthetic-tokens", a.synthetic_tokens,
               "train on uniform token ids in [0, V) drawn from --seed, enough for every step "
               "(for timing; no --data)");
  app.add_option("--peak-tflops", a.peak_tflops,
                 "the peak (TFLOPS) for the MFU line; default on cuda: the GPU's bf16 dense peak "
                 "from NVIDIA's datasheets (H100, H200, A100)")
      ->check(finite_number());
}

}  // namespace

void add_training_options(CLI::App& app, TrainGptOptions& a) {
  auto& cfg = a.cfg;
  app.add_option("--batch", cfg.batch, "sequences per rank per step")
      ->capture_default_str()
      ->check(int_range(1, 65536));
  app.add_option("--steps", cfg.steps,
                 "optimizer steps (0: only write or evaluate the starting model)")
      ->capture_default_str()
      ->check(int_range(0, 100000000));
  app.add_option("--lr", cfg.lr, "learning rate")->capture_default_str()->check(finite_number());
  app.add_option("--optimizer", cfg.optimizer, "sgd | adamw")
      ->capture_default_str()
      ->check(CLI::IsMember({"sgd", "adamw"}));
  app.add_option("--seed", cfg.seed, "initialisation seed")
      ->capture_default_str()
      ->check(uint64_any());
  app.add_option("--data", a.data_path,
                 "training tokens: a text's bytes, or an llm.c token file with --vocab other than "
                 "256");
  app.add_option("--eval-data", a.eval_path,
                 "held-out tokens (as --data): loss before and after training");
  app.add_option("--eval-batches", cfg.eval_batches, "global batches of --eval-data")
      ->capture_default_str()
      ->check(int_range(0, 1000000));
  app.add_option("--device", a.device,
                 "cpu | fake_cuda[:N] (the stream-ordered test device) | cuda[:N]; without an "
                 "index, rank r uses device r")
      ->capture_default_str();
  app.add_option("--backend", a.backend, "threads | mpi | gloo | nccl")
      ->capture_default_str()
      ->check(CLI::IsMember({"threads", "mpi", "gloo", "nccl"}));
  a.ranks_given = false;
  app.add_option("--ranks", a.ranks, "ranks (threads backend)")
      ->capture_default_str()
      ->check(int_range(1, 1024))
      ->each([&a](const std::string&) { a.ranks_given = true; });
  app.add_option("--sharding", a.sharding,
                 "FULL_SHARD | SHARD_GRAD_OP | NO_SHARD | HYBRID_SHARD | _HYBRID_SHARD_ZERO2 | "
                 "none")
      ->capture_default_str();
  app.add_option("--node-size", cfg.node_size, "HYBRID_SHARD: ranks per shard group")
      ->check(int_range(1, 1 << 30))
      ->each([&a](const std::string&) { a.node_size_given = true; });
  app.add_option("--policy", cfg.policy, "auto-wrap policy (fsdp-plan's grammar)")
      ->capture_default_str();
  app.add_flag("--use-orig-params", cfg.use_orig_params, "keep the original parameters");
  app.add_flag("--forward-prefetch", cfg.forward_prefetch, "prefetch the next unit in forward");
  app.add_flag("--cpu-offload", cfg.cpu_offload,
               "CPUOffload(offload_params=True): on an accelerator, the shards, their gradients "
               "and the optimizer step in host memory");
  app.add_option("--backward-prefetch", a.prefetch, "pre | post | none")
      ->capture_default_str()
      ->each([&a](const std::string&) { a.backward_prefetch_given = true; });
  app.add_option("--clip-grad-norm", cfg.clip_grad_norm, "clip the total gradient norm (0: off)")
      ->check(finite_number(true));
  app.add_option("--mixed-precision", a.mixed_precision,
                 "all-gather and compute in bf16 or fp16 (float32 shards for the optimizer, "
                 "gradients reduced in the same dtype): bf16 | fp16 | none")
      ->capture_default_str();
  app.add_flag("--allow-nonfinite", cfg.allow_nonfinite,
               "train on after a NaN or infinite loss (default: stop at that step, before "
               "anything is saved)");
  app.add_option("--memory-timeline", cfg.memory_timeline,
                 "write an SVG chart of one step's memory by category (rank 0) to FILE");
  app.add_option("--checkpoint-activations", cfg.checkpoint_activations,
                 "activation checkpointing of the blocks: none | full | selective")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "full", "selective"}));
  app.add_option("--save", cfg.save_path,
                 "write the full checkpoint at the end: FILE.safetensors, or a directory in "
                 "Hugging Face's layout (model.safetensors, sharded above --max-shard-size); "
                 "checked before the first step")
      ->check(non_empty_path());
  app.add_option_function<std::string>(
         "--max-shard-size",
         [&cfg](const std::string& s) { cfg.max_shard_bytes = io::parse_size(s); },
         "--save DIR: the largest file of the sharded layout, as transformers' max_shard_size: "
         "5GB, 500MB, 2GiB or bytes")
      ->default_str(size_text(cfg.max_shard_bytes))
      ->check(byte_size());
  app.add_option("--checkpoint-dir", cfg.checkpoint_dir,
                 "write resumable sharded checkpoints (model, optimizer, progress, checksums, the "
                 "job's identity) here; DIR/.lock keeps a second job out")
      ->check(non_empty_path());
  app.add_option("--save-every", cfg.save_every,
                 "with --checkpoint-dir: save every K steps (and after the last)")
      ->check(int_range(0, 100000000));
  app.add_option("--keep", cfg.keep, "with --checkpoint-dir: keep only the newest N checkpoints")
      ->check(int_range(0, 1000000));
  app.add_option("--resume", cfg.resume_dir,
                 "continue from the newest checkpoint in DIR (to --steps in total); it must match "
                 "this job (model, parameters, optimizer, --lr, world size, --batch, --data)")
      ->check(non_empty_path());
  app.add_option("--allow-change", a.allow_change,
                 "with --resume, what may differ from the checkpoint (comma-separated): lr (train "
                 "on with this --lr), world-size (other --ranks with the same global batch, "
                 "--batch x ranks)")
      ->delimiter(',')
      ->check(CLI::IsMember(
          std::vector<std::string>(std::begin(kAllowChangeNames), std::end(kAllowChangeNames))));
  app.add_option("--log-every", a.log_every, "print every K steps")
      ->capture_default_str()
      ->check(int_range(1, 100000000));
  app.add_option("--threads-per-rank", a.threads_per_rank, "BLAS threads per rank")
      ->capture_default_str()
      ->check(int_range(1, 1024));
  app.add_option("--float32-matmul-precision", a.float32_matmul_precision,
                 "float32 products on CUDA: highest (float32) | high | medium (TF32), as "
                 "torch.set_float32_matmul_precision")
      ->capture_default_str()
      ->check(CLI::IsMember({"highest", "high", "medium"}));
}

void parse_job_options(CLI::App& app, TrainGptOptions& o, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    o.help = app.help();
  } catch (const CLI::ParseError& e) {
    throw UsageError(fmt::format("{} (see {} --help)", e.what(), o.program));
  }
}

TrainGptOptions parse_train_gpt_options(int argc, const char* const* argv) {
  CLI::App app{"Train a byte-level GPT with FSDP (fsdp-cpp)"};
  TrainGptOptions o;
  add_gpt_model_options(app, o);
  add_training_options(app, o);
  app.add_option("--load", o.cfg.load_path,
                 "start from a full checkpoint (a .safetensors file or a --save directory; its "
                 "checksums are verified)")
      ->check(non_empty_path());
  app.add_option("--export-model", o.export_path,
                 "write the model as an fsdp-model/1 file for fsdp-plan (built on meta)");
  parse_job_options(app, o, argc, argv);
  return o;
}

void check_train_gpt_options(TrainGptOptions& o) {
  if (std::string why = combination_error(o); !why.empty())
    throw UsageError(fmt::format("{} (see {} --help)", why, o.program));
}

std::optional<policies::ShardingStrategy> parse_sharding(const std::string& s) {
  if (s == "none") return std::nullopt;
  if (auto v = policies::find_strategy(s)) return v;
  throw ValueError("--sharding: " + policies::unknown_strategy_message(
                                        s, "", "none (the unsharded model, one rank)"));
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
