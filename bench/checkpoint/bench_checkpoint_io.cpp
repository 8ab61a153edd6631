// bench_checkpoint_io: save and load times of full and sharded checkpoints of a ~1 GB GPT (FSDP
// FULL_SHARD on thread ranks), against the disk's sequential write speed measured in the same run
// (a plain write + fsync loop of as many bytes from memory, 8 MiB writes) and a plain read of the
// same file.
// Prints a table of medians and of per-round ratios (each save against the plain write just
// before it); --json FILE writes every round.
//   bench_checkpoint_io [--dir DIR] [--ranks 1,2,4] [--iters 3] [--layers 20] [--d-model 1024]
//                       [--json FILE]
// Loads read files just written, so they come from the page cache, as the plain read does.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "bench/common/cli.h"
#include "bench/common/report.h"
#include "bench/common/timing.h"
#include "comm/threads/run_ranks.h"
#include "core/error.h"
#include "core/io/safetensors.h"
#include "examples/gpt.h"
#include "fsdp/checkpoint.h"
#include "fsdp/checkpoint_full.h"
#include "fsdp/full_state_dict.h"
#include "fsdp/fully_sharded_data_parallel.h"
#include "policies/policy_build.h"

using namespace fsdp;
namespace fs = std::filesystem;
using bench::median;

namespace {

double seconds_since(double t0_ms) {
  return (bench::wall_now_ms() - t0_ms) * 1e-3;
}

// The baseline: `bytes` of memory (a buffer as large as the model, filled beforehand, as a
// model's bytes are) written sequentially in 8 MiB writes and fsynced, then read back into a
// fresh buffer.
std::pair<double, double> plain_write_read(const fs::path& file, std::uint64_t bytes) {
  constexpr std::size_t kChunk = 8u << 20;
  std::vector<char> source(bytes, 1);
  double t0 = bench::wall_now_ms();
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FSDP_CHECK(fd >= 0, RuntimeError, "cannot create {}: {}", file.string(), std::strerror(errno));
  for (std::uint64_t off = 0; off < bytes;) {
    const std::size_t n = std::min<std::uint64_t>(bytes - off, kChunk);
    FSDP_CHECK(::write(fd, source.data() + off, n) == static_cast<ssize_t>(n), RuntimeError,
               "write {} failed", file.string());
    off += n;
  }
  FSDP_CHECK(::fsync(fd) == 0, RuntimeError, "fsync {} failed", file.string());
  ::close(fd);
  const double write_s = seconds_since(t0);
  t0 = bench::wall_now_ms();
  const int rfd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  std::vector<char> whole(bytes);  // a reader allocates its destination too
  for (std::uint64_t off = 0; off < bytes;) {
    const ssize_t r = ::pread(rfd, whole.data() + off, bytes - off, static_cast<off_t>(off));
    FSDP_CHECK(r > 0, RuntimeError, "read {} failed", file.string());
    off += static_cast<std::uint64_t>(r);
  }
  ::close(rfd);
  const double read_s = seconds_since(t0);
  fs::remove(file);
  return {write_s, read_s};
}

struct Times {
  // Per round: the plain write (+ fsync) and read just before each save, then the save and load.
  std::vector<double> disk_write, plain_read, sharded_save, sharded_load, full_save, full_load;
};

// One world size: the model built on meta and materialised unit by unit (zeros), then `reps`
// rounds of [plain write/read, sharded save, sharded load, plain write/read, full save, full
// load], each timed on rank 0 between barriers. The disk's speed varies from second to second
// on a shared machine: each save is compared with the plain write just before it.
Times run_world(int world, const examples::GPTConfig& cfg, const fs::path& dir, int reps,
                std::uint64_t* model_bytes) {
  Times times;
  comm::run_ranks(world, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto gpt = std::make_shared<examples::GPT>(cfg, TensorOptions(DType::Float32, kMeta));
    WrapperOptions o;
    o.process_group = pg;
    o.auto_wrap_policy = policies::build_policy("transformer([TransformerEncoderLayer])");
    o.param_init_fn = [](nn::Module& m) {
      for (auto& [name, p] : m.named_parameters("", /*recurse=*/false)) p.zero_();
    };
    // The whole model's bytes (counted before wrapping: afterwards a rank holds its shard).
    const std::uint64_t bytes = static_cast<std::uint64_t>(gpt->num_parameters()) * 4;
    auto model = FullyShardedDataParallel::make(gpt, o);
    const bool lead = pg->rank() == 0;
    if (lead) *model_bytes = bytes;
    auto timed = [&](std::vector<double>& out, const std::function<void()>& f) {
      pg->barrier();
      const double t0 = bench::wall_now_ms();
      f();
      pg->barrier();
      if (lead) out.push_back(seconds_since(t0));
    };
    auto baseline = [&] {
      if (lead) {
        const auto [w, r] = plain_write_read(dir / "plain.bin", bytes);
        times.disk_write.push_back(w);
        times.plain_read.push_back(r);
      }
      pg->barrier();
    };
    const fs::path sharded = dir / fmt::format("sharded-w{}", world);
    const fs::path full = dir / fmt::format("full-w{}.safetensors", world);
    for (int r = 0; r < reps; ++r) {
      std::string path;
      baseline();
      timed(times.sharded_save, [&] {
        path = save_sharded_checkpoint(sharded.string(), *model, nullptr, {r, r, {}}, *pg);
      });
      timed(times.sharded_load, [&] { load_sharded_checkpoint(path, *model, nullptr); });
      if (lead) fs::remove_all(sharded);  // each save starts from the same page cache
      baseline();
      timed(times.full_save, [&] {
        save_full_state_dict(*model, full.string(), {{"format", "pt"}});
      });
      timed(times.full_load,
            [&] { load_full_state_dict(*model, io::load_safetensors(full.string()).tensors); });
      pg->barrier();
      if (lead) fs::remove(full);
    }
  });
  return times;
}

// The median over rounds of baseline[i] / measured[i], as a percentage.
double median_ratio(const std::vector<double>& baseline, const std::vector<double>& measured) {
  std::vector<double> r;
  for (std::size_t i = 0; i < measured.size(); ++i) r.push_back(100 * baseline[i] / measured[i]);
  return median(r);
}

}  // namespace

int main(int argc, char** argv) {
  bench::Cli cli("bench_checkpoint_io",
                 "checkpoint save/load (full and sharded) against a plain write + fsync and read");
  CLI::App& app = cli.app();
  std::string dir_arg = fs::temp_directory_path().string();
  std::vector<int> worlds{1, 2, 4};
  int reps = 3;
  examples::GPTConfig cfg{.layers = 20, .d_model = 1024, .heads = 16, .seq = 128, .vocab = 256};
  app.add_option("--dir", dir_arg, "where the checkpoints go")->capture_default_str();
  app.add_option("--ranks", worlds, "world sizes (thread ranks)")
      ->delimiter(',')
      ->check(bench::at_least(1))
      ->capture_default_str();
  cli.add_iters(reps, "rounds per world size (medians)");
  app.add_option("--layers", cfg.layers)->check(bench::at_least(1))->capture_default_str();
  app.add_option("--d-model", cfg.d_model)->check(bench::at_least(1))->capture_default_str();
  if (const int rc = cli.parse(argc, argv); rc >= 0) return rc;
  return bench::run_main(cli.program(), [&] {
    const fs::path dir = fs::path(dir_arg) / fmt::format("fsdp-bench-ckpt-{}", ::getpid());
    fs::create_directories(dir);

    bench::Report report(cli);
    report["model"] = fmt::format("GPT L{} D{}", cfg.layers, cfg.d_model);
    report["dir"] = dir_arg;
    fmt::print("{:>5} {:>9} {:>9} | {:>12} {:>12} {:>12} {:>12} | {:>8} {:>8} {:>8} {:>8}\n",
               "ranks", "disk w", "plain r", "sharded save", "sharded load", "full save",
               "full load", "sh.save", "sh.load", "fu.save", "fu.load");
    fmt::print("{:>5} {:>9} {:>9} | {:>12} {:>12} {:>12} {:>12} | {:>35}\n", "", "GB/s", "GB/s",
               "s", "s", "s", "s", "median of per-round ratios to the plain write/read");
    for (int world : worlds) {
      std::uint64_t bytes = 0;
      const Times t = run_world(world, cfg, dir, reps, &bytes);
      // Baselines: rounds 0, 2, 4, ... precede sharded saves; 1, 3, 5, ... full saves.
      std::vector<double> w_sh, w_fu, r_sh, r_fu;
      for (std::size_t i = 0; i < t.disk_write.size(); ++i) {
        (i % 2 ? w_fu : w_sh).push_back(t.disk_write[i]);
        (i % 2 ? r_fu : r_sh).push_back(t.plain_read[i]);
      }
      const double gb = static_cast<double>(bytes) / 1e9;
      const double ratios[4] = {median_ratio(w_sh, t.sharded_save),
                                median_ratio(r_sh, t.sharded_load), median_ratio(w_fu, t.full_save),
                                median_ratio(r_fu, t.full_load)};
      fmt::print(
          "{:>5} {:>9.2f} {:>9.2f} | {:>12.3f} {:>12.3f} {:>12.3f} {:>12.3f} | {:>7.0f}% {:>7.0f}% "
          "{:>7.0f}% {:>7.0f}%\n",
          world, gb / median(t.disk_write), gb / median(t.plain_read), median(t.sharded_save),
          median(t.sharded_load), median(t.full_save), median(t.full_load), ratios[0], ratios[1],
          ratios[2], ratios[3]);
      std::fflush(stdout);
      report.row({{"ranks", world},
                  {"bytes", bytes},
                  {"disk_write_s", t.disk_write},
                  {"plain_read_s", t.plain_read},
                  {"sharded_save_s", t.sharded_save},
                  {"sharded_load_s", t.sharded_load},
                  {"full_save_s", t.full_save},
                  {"full_load_s", t.full_load}});
      // Percent of the plain write's (read's) speed, median over rounds.
      const char* names[4] = {"sharded_save", "sharded_load", "full_save", "full_load"};
      for (int k = 0; k < 4; ++k)
        report.ratio(fmt::format("{}_vs_plain_pct_{}r", names[k], world), ratios[k]);
    }
    fs::remove_all(dir);
    report.write();
    return 0;
  });
}
