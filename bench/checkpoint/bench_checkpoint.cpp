// bench_checkpoint: save and load times of full and sharded checkpoints of a ~1 GB GPT (FSDP
// FULL_SHARD on thread ranks), against the disk's sequential write speed measured in the same run
// (a plain write + fsync loop of as many bytes from memory, 8 MiB writes) and a plain read of the
// same file.
// Prints a table of medians and of per-round ratios (each save against the plain write just
// before it); --json FILE writes every round.
//   bench_checkpoint [--dir DIR] [--ranks 1,2,4] [--reps 3] [--layers 20] [--d-model 1024]
//                    [--json FILE]
// Loads read files just written, so they come from the page cache, as the plain read does.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "comm/threads/run_threads.h"
#include "core/error.h"
#include "core/io/safetensors.h"
#include "examples/gpt.h"
#include "fsdp/checkpoint.h"
#include "fsdp/checkpoint_full.h"
#include "fsdp/full_state_dict.h"
#include "fsdp/fully_sharded_data_parallel.h"
#include "tools/plan/policy_build.h"
#include "tools/plan/policy_expr.h"

using namespace fsdp;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The baseline: `bytes` of memory (a buffer as large as the model, filled beforehand, as a
// model's bytes are) written sequentially in 8 MiB writes and fsynced, then read back into a
// fresh buffer.
std::pair<double, double> plain_write_read(const fs::path& file, std::uint64_t bytes) {
  constexpr std::size_t kChunk = 8u << 20;
  std::vector<char> source(bytes, 1);
  auto t0 = Clock::now();
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
  t0 = Clock::now();
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
  comm::run_threads(world, [&](comm::ProcessGroup& pg) {
    auto gpt = std::make_shared<examples::GPT>(cfg, TensorOptions(DType::Float32, kMeta));
    WrapperOptions o;
    o.process_group =
        process_group_handle(std::shared_ptr<comm::ProcessGroup>(&pg, [](comm::ProcessGroup*) {}));
    o.auto_wrap_policy =
        plan::build_policy(plan::parse_policy("transformer([TransformerEncoderLayer])"));
    o.param_init_fn = param_init_fn_handle([](nn::Module& m) {
      for (auto& [name, p] : m.named_parameters("", /*recurse=*/false)) p.zero_();
    });
    // The whole model's bytes (counted before wrapping: afterwards a rank holds its shard).
    const std::uint64_t bytes = static_cast<std::uint64_t>(gpt->num_parameters()) * 4;
    auto model = FullyShardedDataParallel::make(gpt, o);
    const bool lead = pg.rank() == 0;
    if (lead) *model_bytes = bytes;
    auto timed = [&](std::vector<double>& out, const std::function<void()>& f) {
      pg.barrier();
      const auto t0 = Clock::now();
      f();
      pg.barrier();
      if (lead) out.push_back(seconds_since(t0));
    };
    auto baseline = [&] {
      if (lead) {
        const auto [w, r] = plain_write_read(dir / "plain.bin", bytes);
        times.disk_write.push_back(w);
        times.plain_read.push_back(r);
      }
      pg.barrier();
    };
    const fs::path sharded = dir / fmt::format("sharded-w{}", world);
    const fs::path full = dir / fmt::format("full-w{}.safetensors", world);
    for (int r = 0; r < reps; ++r) {
      std::string path;
      baseline();
      timed(times.sharded_save, [&] {
        path = save_sharded_checkpoint(sharded.string(), *model, nullptr, {r, r, {}}, pg);
      });
      timed(times.sharded_load, [&] { load_sharded_checkpoint(path, *model, nullptr); });
      if (lead) fs::remove_all(sharded);  // each save starts from the same page cache
      baseline();
      timed(times.full_save, [&] {
        save_full_state_dict(*model, full.string(), {{"format", "pt"}});
      });
      timed(times.full_load,
            [&] { load_full_state_dict(*model, io::load_safetensors(full.string()).tensors); });
      pg.barrier();
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

std::vector<int> parse_ranks(const std::string& s) {
  std::vector<int> out;
  std::size_t pos = 0;
  while (pos < s.size()) {
    const std::size_t comma = s.find(',', pos);
    out.push_back(std::stoi(s.substr(pos, comma - pos)));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string dir_arg = fs::temp_directory_path().string(), json_path, ranks_arg = "1,2,4";
    int reps = 3;
    examples::GPTConfig cfg{.layers = 20, .d_model = 1024, .heads = 16, .seq = 128, .vocab = 256};
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      FSDP_CHECK(i + 1 < argc, ValueError, "bench_checkpoint: {} needs a value", a);
      const std::string v = argv[++i];
      if (a == "--dir")
        dir_arg = v;
      else if (a == "--ranks")
        ranks_arg = v;
      else if (a == "--reps")
        reps = std::stoi(v);
      else if (a == "--layers")
        cfg.layers = std::stoll(v);
      else if (a == "--d-model")
        cfg.d_model = std::stoll(v);
      else if (a == "--json")
        json_path = v;
      else
        throw ValueError(fmt::format("bench_checkpoint: unknown flag {}", a));
    }
    FSDP_CHECK(reps >= 1, ValueError, "bench_checkpoint: --reps must be >= 1");
    const fs::path dir = fs::path(dir_arg) / fmt::format("fsdp-bench-ckpt-{}", ::getpid());
    fs::create_directories(dir);

    nlohmann::ordered_json report = {{"model", fmt::format("GPT L{} D{}", cfg.layers, cfg.d_model)},
                                     {"dir", dir_arg},
                                     {"reps", reps},
                                     {"worlds", {}}};
    fmt::print("{:>5} {:>9} {:>9} | {:>12} {:>12} {:>12} {:>12} | {:>8} {:>8} {:>8} {:>8}\n",
               "ranks", "disk w", "plain r", "sharded save", "sharded load", "full save",
               "full load", "sh.save", "sh.load", "fu.save", "fu.load");
    fmt::print("{:>5} {:>9} {:>9} | {:>12} {:>12} {:>12} {:>12} | {:>35}\n", "", "GB/s", "GB/s",
               "s", "s", "s", "s", "median of per-round ratios to the plain write/read");
    for (int world : parse_ranks(ranks_arg)) {
      std::uint64_t bytes = 0;
      const Times t = run_world(world, cfg, dir, reps, &bytes);
      // Baselines: rounds 0, 2, 4, ... precede sharded saves; 1, 3, 5, ... full saves.
      std::vector<double> w_sh, w_fu, r_sh, r_fu;
      for (std::size_t i = 0; i < t.disk_write.size(); ++i) {
        (i % 2 ? w_fu : w_sh).push_back(t.disk_write[i]);
        (i % 2 ? r_fu : r_sh).push_back(t.plain_read[i]);
      }
      const double gb = static_cast<double>(bytes) / 1e9;
      fmt::print(
          "{:>5} {:>9.2f} {:>9.2f} | {:>12.3f} {:>12.3f} {:>12.3f} {:>12.3f} | {:>7.0f}% {:>7.0f}% "
          "{:>7.0f}% {:>7.0f}%\n",
          world, gb / median(t.disk_write), gb / median(t.plain_read), median(t.sharded_save),
          median(t.sharded_load), median(t.full_save), median(t.full_load),
          median_ratio(w_sh, t.sharded_save), median_ratio(r_sh, t.sharded_load),
          median_ratio(w_fu, t.full_save), median_ratio(r_fu, t.full_load));
      std::fflush(stdout);
      report["worlds"].push_back({{"ranks", world},
                                  {"bytes", bytes},
                                  {"disk_write_s", t.disk_write},
                                  {"plain_read_s", t.plain_read},
                                  {"sharded_save_s", t.sharded_save},
                                  {"sharded_load_s", t.sharded_load},
                                  {"full_save_s", t.full_save},
                                  {"full_load_s", t.full_load}});
    }
    fs::remove_all(dir);
    if (!json_path.empty()) std::ofstream(json_path) << report.dump(1) << "\n";
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_checkpoint: error: {}\n", e.what());
    return 1;
  }
}
