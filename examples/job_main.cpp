#include "examples/job_main.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <mutex>

#include "comm/agreement.h"
#include "comm/env.h"
#include "comm/registry.h"
#include "comm/threads/run_ranks.h"
#include "core/blas_kernels.h"
#include "core/env.h"
#include "core/error.h"
#include "core/input_error.h"
#include "core/matmul_precision.h"
#include "core/memory_category.h"
#include "core/parallel.h"
#include "examples/cli_checks.h"
#include "examples/device_timing.h"
#include "examples/gpt_job_model.h"
#include "examples/gpt_train.h"
#include "examples/job_files.h"
#include "examples/mfu.h"
#include "policies/options.h"

namespace fsdp::examples {

namespace {

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

// "'PATH': REASON", for the library's "filesystem error: OPERATION: REASON [PATH]".
std::string plain(const std::filesystem::filesystem_error& e) {
  return fmt::format("'{}': {}", e.path1().string(), e.code().message());
}

// An error's one line, a std::filesystem error said plainly (also one that failed a rank).
std::string plain_message(const std::exception& e) {
  if (auto* fs = dynamic_cast<const std::filesystem::filesystem_error*>(&e)) return plain(*fs);
  const std::string what = e.what();
  if (auto* failed = dynamic_cast<const comm::RankFailedError*>(&e); failed && failed->cause()) {
    try {
      std::rethrow_exception(failed->cause());
    } catch (const std::filesystem::filesystem_error& c) {
      // "rank R of N failed: " and the cause's text: keep the prefix, say the text plainly.
      const std::string raw = c.what();
      if (what.ends_with(raw)) return what.substr(0, what.size() - raw.size()) + plain(c);
    } catch (...) {
    }
  }
  return what;
}

}  // namespace

int job_main(int argc, char** argv, const JobProgram& program) {
  const char* kProgram = program.name;
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
  TrainGptOptions a;
  comm::ThreadsOptions threads_options;
  try {
    a = program.parse(argc, argv);
    if (!a.help.empty()) {
      fmt::print("{}", a.help);
      return 0;
    }
    check_train_gpt_options(a);
    // The launch environment is part of the command line: read (and checked) before any work.
    fsdp::env::check_all();
    if (a.backend == "threads") {
      check_not_launched_for_threads();
      threads_options.timeout = comm::env::timeout().value_or(threads_options.timeout);
    } else {
      comm::options_from_env();
    }
  } catch (const UsageError& e) {
    fmt::print(stderr, "{}: error: {}\n", kProgram, e.what());
    return e.exit_code();
  } catch (const EnvError& e) {
    return environment_error(e);
  } catch (const fsdp::ValueError& e) {  // a bad name (--sharding, --mixed-precision, ...)
    return usage_error(kProgram, e.what());
  } catch (const InputError& e) {  // its message names --policy and the column
    return usage_error(kProgram, e.what());
  }
  GPTTrainConfig& cfg = a.cfg;
  const int ranks = a.ranks, log_every = a.log_every;
  const std::string& sharding = a.sharding;

  try {
    // Our pool first: a thread the system refuses is then one clear error before OpenBLAS starts
    // threads of its own (which retry a refused allocation forever).
    set_num_threads(a.threads_per_rank);  // element-wise kernels (core/parallel.h)
    set_blas_threads(a.threads_per_rank);
    set_float32_matmul_precision(a.float32_matmul_precision);
    // Outputs written after training, checked before step 1.
    if (!cfg.memory_timeline.empty()) check_writable_file("--memory-timeline", cfg.memory_timeline);
    program.prepare(a);
    const std::shared_ptr<const JobModel> job_model =
        cfg.job_model ? cfg.job_model : gpt_job_model(cfg.model);
    const std::int64_t seq = job_model->seq();
    std::mutex print_mutex;
    auto run_rank = [&](const std::shared_ptr<comm::ProcessGroup>& group) {
      const int rank = group->rank(), world = group->size();
      GPTTrainConfig c = cfg;
      const double tokens_per_step =
          static_cast<double>(cfg.batch) * world * static_cast<double>(seq);
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
      c.on_warning = [&](const std::string& what) {  // rank 0's, about checkpoints
        std::lock_guard<std::mutex> lock(print_mutex);
        fmt::print(stderr, "{}: warning: {}\n", kProgram, what);
      };
      GPTTrainResult r = train_gpt(c, group);
      std::lock_guard<std::mutex> lock(print_mutex);
      if (rank == 0) {
        const int timed = std::max(0, cfg.steps - r.first_step - 1);
        fmt::print("model: {}: {} parameters; {} rank(s), {}, batch {} per rank\n",
                   job_model->description(), r.num_parameters, world, sharding, cfg.batch);
        if (timed > 0) {
          fmt::print(
              "tokens/s {:.0f}  ms/step {:.1f}  exposed communication {:.1f}%  (timed by {})\n",
              tokens_per_step * timed / r.seconds, 1000.0 * r.seconds / timed,
              100.0 * r.exposed_comm_seconds / r.seconds, r.timed_by);
          // Per rank: each rank has its own device and peak.
          const std::string mfu = mfu_line(
              r.device, device_name(r.device), a.peak_tflops, cfg.mixed_precision,
              job_model->flops_per_token(r.num_parameters),
              static_cast<double>(cfg.batch) * static_cast<double>(seq) * timed / r.seconds);
          if (!mfu.empty()) fmt::print("{}\n", mfu);
        }
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
      comm::run_ranks(ranks, run_rank, threads_options);
    } else {
      auto group = comm::init_process_group(a.backend);
      run_rank(group);
    }
    return 0;
  } catch (const comm::RanksDisagreeError& e) {  // ranks launched with other arguments
    fmt::print(stderr, "{}: error: {}\n", kProgram, e.what());
    return 2;
  } catch (const std::exception& e) {  // RankFailedError included: "rank R of N failed: ..."
    fmt::print(stderr, "{}: error: {}\n", kProgram, plain_message(e));
    return 1;
  }
}

}  // namespace fsdp::examples
