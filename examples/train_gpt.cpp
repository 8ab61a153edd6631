// train_gpt: a byte-level GPT trained with FSDP, in one process (ranks as threads) or one
// process per rank under mpirun (--backend mpi|gloo|nccl). Prints one line per logged step:
// "step <i> loss <x>" (the mean over the global batch), then tokens/s and per-rank peak memory.
// The data order is exact (examples/gpt_data.h), so N ranks x batch B print the losses of one
// rank with batch N*B.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>

#include "comm/env.h"
#include "comm/registry.h"
#include "comm/threads/run_threads.h"
#include "core/blas_kernels.h"
#include "core/env.h"
#include "core/error.h"
#include "core/memory_category.h"
#include "core/parallel.h"
#include "examples/cli_checks.h"
#include "examples/gpt_train.h"
#include "policies/options.h"
#include "tools/plan/model_export.h"
#include "tools/plan/model_file.h"
#include "tools/plan/policy_expr.h"

using namespace fsdp;

namespace {

// The bytes of `path`, which must hold one sequence of `seq` bytes and its next byte.
std::shared_ptr<const std::string> read_file(const char* option, const std::string& path,
                                             std::int64_t seq) {
  FSDP_CHECK(!std::filesystem::is_directory(path), ValueError, "{}: '{}' is a directory", option,
             path);
  std::ifstream in(path, std::ios::binary);
  FSDP_CHECK(in.good(), ValueError, "{}: cannot open '{}': {}", option, path, std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  auto bytes = std::make_shared<const std::string>(std::move(s).str());
  FSDP_CHECK(std::int64_t(bytes->size()) > seq + 1, ValueError,
             "{}: '{}' has {} bytes; --seq {} needs more than {}", option, path, bytes->size(), seq,
             seq + 1);
  return bytes;
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

// The command line, checked as a whole: the reason it cannot run, or "" (reported with exit 2).
struct CommandLine {
  examples::GPTTrainConfig cfg;
  std::string export_path, data_path, eval_path;
  std::string backend = "threads", sharding = "FULL_SHARD", prefetch = "pre";
  std::string mixed_precision = "none";
  int ranks = 2, log_every = 1, threads_per_rank = 1;
  bool ranks_given = false, node_size_given = false;

  std::string check() {
    const auto& m = cfg.model;
    if (m.d_model % m.heads != 0)
      return fmt::format(
          "--d-model {} is not a multiple of --heads {} (each head gets d_model / heads "
          "dimensions)",
          m.d_model, m.heads);
    cfg.sharding = parse_sharding(sharding);
    cfg.backward_prefetch = parse_prefetch(prefetch);
    cfg.mixed_precision = parse_mixed_precision(mixed_precision);
    if (!cfg.policy.empty()) plan::parse_policy(cfg.policy);  // an InputError names the place
    // --steps 0 only writes: the model file, the initial weights, or the held-out loss.
    if (cfg.steps == 0 && export_path.empty() && cfg.save_path.empty() && cfg.eval_batches == 0)
      return "--steps 0 trains nothing: give --steps 1 or more, or --export-model FILE, --save "
             "PATH or --eval-data FILE --eval-batches N to only export, save or evaluate the "
             "initial model";
    if (backend != "threads" && ranks_given)
      return fmt::format(
          "--ranks is for the threads backend; with --backend {} the launcher's ranks are used "
          "(mpirun -np N, or RANK/WORLD_SIZE)",
          backend);
    const int world = backend == "threads" ? ranks : 0;  // 0: the launcher's, known later
    if (!cfg.sharding && world > 1)
      return fmt::format(
          "--sharding none runs the unsharded model on one rank, got --ranks {} (use --ranks 1 "
          "or a sharding strategy)",
          world);
    if (!cfg.sharding && cfg.mixed_precision)
      return "--mixed-precision is FSDP's: it needs --sharding other than none";
    if (!cfg.sharding && (!cfg.checkpoint_dir.empty() || !cfg.resume_dir.empty()))
      return "--checkpoint-dir and --resume need FSDP (--sharding other than none)";
    if (node_size_given && !(cfg.sharding && policies::is_hybrid(*cfg.sharding)))
      return fmt::format("--node-size is for HYBRID_SHARD and _HYBRID_SHARD_ZERO2, not {}",
                         sharding);
    if (node_size_given && world > 0 && world % cfg.node_size != 0)
      return fmt::format("--node-size {} does not divide --ranks {}: {} shards within whole nodes",
                         cfg.node_size, world, sharding);
    if ((cfg.save_every > 0 || cfg.keep > 0) && cfg.checkpoint_dir.empty())
      return "--save-every and --keep are for --checkpoint-dir";
    if (cfg.eval_batches > 0 && eval_path.empty()) return "--eval-batches needs --eval-data";
    return "";
  }
};

void add_options(CLI::App& app, CommandLine& a) {
  using examples::finite_number;
  using examples::int_range;
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
  app.add_option("--seq", cfg.model.seq, "bytes per sequence (T)")
      ->capture_default_str()
      ->check(int_range(1, 65536));
  app.add_option("--batch", cfg.batch, "sequences per rank per step")
      ->capture_default_str()
      ->check(int_range(1, 65536));
  app.add_option("--steps", cfg.steps,
                 "optimizer steps (0: only --export-model, --save or --eval-data)")
      ->capture_default_str()
      ->check(int_range(0, 100000000));
  app.add_option("--lr", cfg.lr, "learning rate")->capture_default_str()->check(finite_number());
  app.add_option("--optimizer", cfg.optimizer, "sgd | adamw")
      ->capture_default_str()
      ->check(CLI::IsMember({"sgd", "adamw"}));
  app.add_option("--seed", cfg.seed, "initialisation seed")->capture_default_str();
  app.add_option("--data", a.data_path, "training bytes (a file)")->required();
  app.add_option("--eval-data", a.eval_path, "held-out bytes: loss before and after training");
  app.add_option("--eval-batches", cfg.eval_batches, "global batches of --eval-data")
      ->capture_default_str()
      ->check(int_range(0, 1000000));
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
  app.add_option("--backward-prefetch", a.prefetch, "pre | post | none")->capture_default_str();
  app.add_option("--clip-grad-norm", cfg.clip_grad_norm, "clip the total gradient norm (0: off)")
      ->check(finite_number(true));
  app.add_option("--mixed-precision", a.mixed_precision,
                 "all-gather and compute in bf16 or fp16 (float32 shards for the optimizer, "
                 "gradients reduced in the same dtype): bf16 | fp16 | none")
      ->capture_default_str();
  app.add_option("--memory-timeline", cfg.memory_timeline,
                 "write an SVG chart of one step's memory by category (rank 0) to FILE");
  app.add_option("--checkpoint-activations", cfg.checkpoint_activations,
                 "activation checkpointing of the blocks: none | full | selective")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "full", "selective"}));
  app.add_option("--save", cfg.save_path,
                 "write the full checkpoint at the end: FILE.safetensors, or a directory in "
                 "Hugging Face's layout (model.safetensors, sharded above --max-shard-size)");
  app.add_option("--max-shard-size", cfg.max_shard_bytes,
                 "--save DIR: bytes per file of the sharded layout")
      ->capture_default_str()
      ->check(int_range(1, std::int64_t{1} << 50));
  app.add_option("--load", cfg.load_path,
                 "start from a full checkpoint (a .safetensors file or a --save directory)");
  app.add_option("--checkpoint-dir", cfg.checkpoint_dir,
                 "write resumable sharded checkpoints (model, optimizer, progress) here");
  app.add_option("--save-every", cfg.save_every,
                 "with --checkpoint-dir: save every K steps (and after the last)")
      ->check(int_range(0, 100000000));
  app.add_option("--keep", cfg.keep, "with --checkpoint-dir: keep only the newest N checkpoints")
      ->check(int_range(0, 1000000));
  app.add_option("--resume", cfg.resume_dir,
                 "continue from the newest checkpoint in DIR (to --steps in total)");
  app.add_option("--export-model", a.export_path,
                 "write the model as an fsdp-model/1 file for fsdp-plan (built on meta)");
  app.add_option("--log-every", a.log_every, "print every K steps")
      ->capture_default_str()
      ->check(int_range(1, 100000000));
  app.add_option("--threads-per-rank", a.threads_per_rank, "BLAS threads per rank")
      ->capture_default_str()
      ->check(int_range(1, 1024));
}

// The threads backend runs every rank in this process: a launcher that started several
// processes (WORLD_SIZE or mpirun's size above 1) would get as many independent jobs.
void check_not_launched_for_threads() {
  const auto world = comm::env::world_size();
  if (!world || *world == 1) return;
  throw EnvError(fmt::format(
      "{}={} says a launcher started {} processes, but --backend threads runs every rank in this "
      "one: use --backend mpi, gloo or nccl (or run one process without the launcher)",
      comm::env::world_size_variable(), *world, *world));
}

}  // namespace

int main(int argc, char** argv) {
  constexpr const char* kProgram = "train_gpt";
  // A bad launch environment: one line, as a bad command line, but with no --help to see.
  auto environment_error = [&](const EnvError& e) {
    fmt::print(stderr, "{}: error: {}\n", kProgram, e.what());
    return 2;
  };
  try {
    select_blas_kernels(argv);  // may re-execute with OPENBLAS_CORETYPE set (core/blas_kernels.h)
  } catch (const EnvError& e) {
    return environment_error(e);
  }
  CLI::App app{"Train a byte-level GPT with FSDP (fsdp-cpp)"};
  CommandLine a;
  add_options(app, a);
  if (auto status = examples::parse_command_line(app, argc, argv, kProgram)) return *status;
  examples::GPTTrainConfig& cfg = a.cfg;
  const int ranks = a.ranks, log_every = a.log_every;
  const std::string& sharding = a.sharding;
  comm::ThreadsOptions threads_options;
  try {
    if (std::string why = a.check(); !why.empty()) return examples::usage_error(kProgram, why);
    // The launch environment is part of the command line: read (and checked) before any work.
    fsdp::env::check_all();
    if (a.backend == "threads") {
      check_not_launched_for_threads();
      threads_options.timeout = comm::env::timeout().value_or(threads_options.timeout);
    } else {
      comm::options_from_env();
    }
  } catch (const EnvError& e) {
    return environment_error(e);
  } catch (const fsdp::ValueError& e) {  // a bad name (--sharding, --mixed-precision, ...)
    return examples::usage_error(kProgram, e.what());
  } catch (const plan::InputError& e) {  // its message names --policy and the column
    return examples::usage_error(kProgram, e.what());
  }

  try {
    set_blas_threads(a.threads_per_rank);
    set_num_threads(a.threads_per_rank);  // element-wise kernels (core/parallel.h)
    if (!a.export_path.empty()) {
      examples::GPT meta_model(cfg.model, TensorOptions(DType::Float32, kMeta));
      plan::write_model_file(meta_model, a.export_path);
      fmt::print("model file: {}\n", a.export_path);
    }
    cfg.data = read_file("--data", a.data_path, cfg.model.seq);
    if (!a.eval_path.empty()) cfg.eval_data = read_file("--eval-data", a.eval_path, cfg.model.seq);

    std::mutex print_mutex;
    auto run_rank = [&](const std::shared_ptr<comm::ProcessGroup>& group) {
      const int rank = group->rank(), world = group->size();
      examples::GPTTrainConfig c = cfg;
      const double tokens_per_step =
          static_cast<double>(cfg.batch) * world * static_cast<double>(cfg.model.seq);
      auto last = std::chrono::steady_clock::now();
      int since = 0;
      c.on_step = [&](int step, double loss) {
        ++since;
        if (rank != 0 || ((step + 1) % log_every != 0 && step + 1 != cfg.steps)) return;
        const auto now = std::chrono::steady_clock::now();
        const double secs = std::chrono::duration<double>(now - last).count();
        std::lock_guard<std::mutex> lock(print_mutex);
        fmt::print("step {} loss {:.8g} tokens/s {:.0f}\n", step, loss,
                   tokens_per_step * since / secs);
        std::fflush(stdout);
        last = now;
        since = 0;
      };
      examples::GPTTrainResult r = examples::train_gpt(c, group);
      std::lock_guard<std::mutex> lock(print_mutex);
      if (rank == 0) {
        const int timed = std::max(0, cfg.steps - r.first_step - 1);
        fmt::print("model: GPT L{} D{} H{} T{}: {} parameters; {} rank(s), {}, batch {} per rank\n",
                   cfg.model.layers, cfg.model.d_model, cfg.model.heads, cfg.model.seq,
                   r.num_parameters, world, sharding, cfg.batch);
        if (timed > 0)
          fmt::print("tokens/s {:.0f}  ms/step {:.1f}  exposed communication {:.1f}%\n",
                     tokens_per_step * timed / r.seconds, 1000.0 * r.seconds / timed,
                     100.0 * r.exposed_comm_seconds / r.seconds);
        if (cfg.sharding && timed > 0)
          fmt::print("communicated per step: all-gather {:.2f} MiB, reduce {:.2f} MiB\n",
                     r.all_gather_bytes / 1048576.0 / timed, r.reduce_bytes / 1048576.0 / timed);
        if (cfg.eval_data && cfg.eval_batches > 0)
          fmt::print("held-out loss before {:.6f} after {:.6f}\n", r.eval_before, r.eval_after);
      }
      fmt::print("rank {} peak memory {:.2f} MiB", rank, r.peak_bytes / 1048576.0);
      if (r.memory_bound_bytes > 0)
        fmt::print(
            "; one step: peak {:.2f} MiB = {:.2f} x the bound {:.2f} MiB (shards, two "
            "largest units, activations)",
            r.step_peak_bytes / 1048576.0, double(r.step_peak_bytes) / double(r.memory_bound_bytes),
            r.memory_bound_bytes / 1048576.0);
      fmt::print("\n");
      if (r.step_peak_bytes > 0) {
        // What the step's peak is made of (the memory timeline's categories at that moment).
        fmt::print("rank {} at the step's peak:", rank);
        const char* sep = " ";
        for (MemoryCategory c : kMemoryCategories) {
          const auto bytes = r.step_peak_by_category[static_cast<std::size_t>(c)];
          if (bytes == 0) continue;
          fmt::print("{}{} {:.2f} MiB", sep, memory_category_name(c), bytes / 1048576.0);
          sep = ", ";
        }
        fmt::print("\n");
      }
      std::fflush(stdout);
      if (cfg.eval_data && cfg.eval_batches > 0 && cfg.steps > r.first_step &&
          !(r.eval_after < r.eval_before))
        throw RuntimeError("the held-out loss did not fall");
    };

    if (a.backend == "threads") {
      comm::run_threads(
          ranks,
          [&](comm::ProcessGroup& pg) {
            run_rank(std::shared_ptr<comm::ProcessGroup>(&pg, [](comm::ProcessGroup*) {}));
          },
          threads_options);
    } else {
      auto group = comm::init_process_group(a.backend);
      run_rank(group);
    }
    return 0;
  } catch (const comm::RankFailedError& e) {
    fmt::print(stderr, "train_gpt: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "train_gpt: error: {}\n", e.what());
    return 1;
  }
}
