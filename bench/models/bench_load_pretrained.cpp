// bench_load_pretrained: loading a save_pretrained directory from a cold page cache against the
// disk's cold sequential read speed of the same files, in the same run (issue 26 item 7: >= 70%).
//   bench_load_pretrained [--dir DIR] [--mb 1024] [--iters 3] [--ranks 2] [--max-shard-size S]
//                         [--hidden 1024] [--vocab 32000] [--keep] [--json FILE]
// Writes a Llama directory of about --mb MB (random weights, models::save_pretrained; sharded
// with an index above --max-shard-size) under --dir, then per round: evict the files from the
// page cache and read them with read() in 1, 16 and 256 MiB blocks, evicting before each (the
// fastest is the disk's speed), evict again, time
// models::from_pretrained(dir); evict again, time the FSDP path on --ranks thread ranks (the
// model built on meta, FULL_SHARD one unit per decoder layer with allocate_only, each rank
// reading its own shards: fsdp::load_sharded_from). Eviction: fdatasync then
// posix_fadvise(POSIX_FADV_DONTNEED) on every file, and the share of pages still resident
// afterwards (mincore) is reported, so a failed eviction shows. Medians over rounds; the ratios
// are load speed / disk speed, each load against the disk read of its own round.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/common/cli.h"
#include "bench/common/report.h"
#include "bench/common/timing.h"
#include "comm/threads/run_ranks.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/io/safetensors_dir.h"
#include "fsdp/fully_sharded_data_parallel.h"
#include "fsdp/load_sharded.h"
#include "models/auto_model.h"
#include "models/load_weights.h"
#include "models/pretrained.h"
#include "policies/policy_build.h"

using namespace fsdp;
namespace fs = std::filesystem;
using bench::median;

namespace {

double seconds_since(double t0_ms) {
  return (bench::wall_now_ms() - t0_ms) * 1e-3;
}

std::vector<fs::path> files_of(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  return files;
}

// Drops every file of `dir` from the page cache; returns the share of their pages (0..1) still
// resident afterwards.
double evict(const fs::path& dir) {
  std::uint64_t pages = 0, resident = 0;
  const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  for (const fs::path& f : files_of(dir)) {
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    FSDP_CHECK(fd >= 0, RuntimeError, "cannot open {}: {}", f.string(), std::strerror(errno));
    ::fdatasync(fd);
    const int rc = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    FSDP_CHECK(rc == 0, RuntimeError, "posix_fadvise(DONTNEED) on {}: {}", f.string(),
               std::strerror(rc));
    const std::uint64_t size = fs::file_size(f);
    if (size > 0) {
      void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
      if (map != MAP_FAILED) {
        std::vector<unsigned char> vec((size + page - 1) / page);
        if (::mincore(map, size, vec.data()) == 0)
          for (unsigned char v : vec) resident += v & 1;
        pages += vec.size();
        ::munmap(map, size);
      }
    }
    ::close(fd);
  }
  return pages ? static_cast<double>(resident) / static_cast<double>(pages) : 0.0;
}

// The disk's speed: every file of `dir` read sequentially with read() in `block`-byte blocks
// into one buffer. Returns {seconds, bytes}.
std::pair<double, std::uint64_t> plain_read(const fs::path& dir, std::size_t block) {
  std::vector<char> buf(block);
  std::uint64_t bytes = 0;
  const double t0 = bench::wall_now_ms();
  for (const fs::path& f : files_of(dir)) {
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    FSDP_CHECK(fd >= 0, RuntimeError, "cannot open {}: {}", f.string(), std::strerror(errno));
    for (;;) {
      const ssize_t n = ::read(fd, buf.data(), block);
      FSDP_CHECK(n >= 0, RuntimeError, "read {} failed: {}", f.string(), std::strerror(errno));
      if (n == 0) break;
      bytes += static_cast<std::uint64_t>(n);
    }
    ::close(fd);
  }
  return {seconds_since(t0), bytes};
}

// The block sizes of the plain read. Which is fastest varies on a virtual disk (here 1 MiB and
// 256 MiB read at twice the speed of 16 MiB): the fastest of each round is the disk's speed.
constexpr std::size_t kBlocks[] = {1u << 20, 16u << 20, 256u << 20};

// A Llama config of about `mb` MB of float32 weights: `hidden` (heads of 64, a quarter of them
// for keys and values), intermediate 2.75 x hidden, `vocab` untied; the layer count sets the size.
nlohmann::json llama_config(std::int64_t mb, std::int64_t H, std::int64_t V) {
  const std::int64_t I = H * 11 / 4, heads = std::max<std::int64_t>(1, H / 64),
                     kv = std::max<std::int64_t>(1, heads / 4);
  const std::int64_t per_layer = 2 * H * H + 2 * H * (H / heads * kv) + 3 * H * I + 2 * H;
  const std::int64_t fixed = 2 * V * H + H;
  const std::int64_t layers = std::max<std::int64_t>(1, (mb * 1000000 / 4 - fixed) / per_layer);
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", H},
          {"intermediate_size", I},
          {"num_hidden_layers", layers},
          {"num_attention_heads", heads},
          {"num_key_value_heads", kv},
          {"vocab_size", V},
          {"max_position_embeddings", 2048},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", false}};
}

// Writes the directory: the model's parameters filled with a cheap pseudo-random pattern (what
// the values are does not matter to the reader; no page is left zero).
void write_model(const fs::path& dir, const nlohmann::json& config, std::int64_t max_shard) {
  const auto meta = models::make_causal_lm(models::parse_config(config, "bench config"),
                                           TensorOptions(DType::Float32, kMeta));
  std::vector<std::pair<std::string, Tensor>> state;
  std::uint32_t x = 12345;
  for (const auto& [fqn, p] : meta->named_parameters()) {
    Tensor t = empty(p.shape(), DType::Float32);
    float* d = static_cast<float*>(t.data_ptr());
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      x = x * 1664525u + 1013904223u;
      d[i] = static_cast<float>(static_cast<std::int32_t>(x >> 8) - (1 << 23)) * 1e-9f;
    }
    state.emplace_back(fqn, t);
  }
  models::save_pretrained(dir.string(), *meta, state, max_shard);
}

// The FSDP path: meta build, FULL_SHARD with one unit per decoder layer and allocate_only, each
// rank filling its shards from the files. Seconds on rank 0, from the build to the last rank's
// end of loading; `wrap_seconds`: rank 0's build and wrap alone.
double fsdp_load(const fs::path& dir, int world, double& wrap_seconds) {
  double seconds = 0;
  comm::run_ranks(world, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    pg->barrier();
    const double t0 = bench::wall_now_ms();
    const auto meta = models::make_causal_lm(models::load_config(dir.string()),
                                             TensorOptions(DType::Float32, kMeta));
    WrapperOptions o;
    o.process_group = pg;
    o.auto_wrap_policy = policies::build_policy(
        fmt::format("transformer([{}])", models::decoder_block_class(*meta)));
    o.param_init_fn = allocate_only();
    auto model = FullyShardedDataParallel::make(meta, o);
    if (pg->rank() == 0) wrap_seconds = seconds_since(t0);
    const io::SafetensorsDir files = models::open_pretrained_weights(dir.string());
    const models::CheckpointNames names = models::checkpoint_names(*meta, files);
    load_sharded_from(*model, files, {names.name_in_file, names.ignore_unexpected});
    for (const auto& [name, module] : meta->named_modules()) models::init_computed_buffers(*module);
    pg->barrier();
    if (pg->rank() == 0) seconds = seconds_since(t0);
  });
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Cli cli("bench_load_pretrained",
                 "from_pretrained from a cold page cache against the disk's cold read speed");
  CLI::App& app = cli.app();
  std::string dir_arg = fs::temp_directory_path().string(), shard_size = "50GB";
  int iters = 3, mb = 1024, ranks = 2, hidden = 1024, vocab = 32000;
  bool keep = false;
  app.add_option("--dir", dir_arg, "where the model directory goes")->capture_default_str();
  app.add_option("--mb", mb, "the model's size in MB")
      ->check(bench::at_least(1))
      ->capture_default_str();
  app.add_option("--hidden", hidden, "the model's hidden size (a multiple of 64 above 64)")
      ->check(bench::at_least(8))
      ->capture_default_str();
  app.add_option("--vocab", vocab, "the model's vocabulary")
      ->check(bench::at_least(2))
      ->capture_default_str();
  app.add_option("--ranks", ranks, "thread ranks of the FSDP load (0: none)")
      ->check(bench::at_least(0))
      ->capture_default_str();
  app.add_option("--max-shard-size", shard_size, "save_pretrained's shard limit")
      ->capture_default_str();
  app.add_flag("--keep", keep, "leave the model directory in --dir");
  cli.add_iters(iters, "rounds (medians)");
  if (const int rc = cli.parse(argc, argv); rc >= 0) return rc;
  return bench::run_main(cli.program(), [&] {
    const std::int64_t max_shard = io::parse_size(shard_size);
    const fs::path dir = fs::path(dir_arg) / fmt::format("fsdp-bench-load-{}", ::getpid());
    FSDP_CHECK(hidden <= 64 || hidden % 64 == 0, std::invalid_argument,
               "--hidden {} is not a multiple of 64", hidden);
    const nlohmann::json config = llama_config(mb, hidden, vocab);
    double t0 = bench::wall_now_ms();
    write_model(dir, config, max_shard);
    const double write_s = seconds_since(t0);
    std::uint64_t bytes = 0;
    for (const fs::path& f : files_of(dir)) bytes += fs::file_size(f);
    const std::size_t n_files = files_of(dir).size();
    fmt::print(
        "Llama {} layers, hidden {}, vocab {}: {:.0f} MB in {} files under {} (written in {:.1f} "
        "s)\n",
        config["num_hidden_layers"].get<int>(), hidden, vocab, bytes / 1e6, n_files, dir_arg,
        write_s);
    fmt::print("cold: fdatasync + posix_fadvise(POSIX_FADV_DONTNEED) before each read\n");
    std::map<std::size_t, std::vector<double>> block_s;  // each block size's reads
    std::vector<double> read_s, load_s, fsdp_s, wrap_s, resident, load_ratio, fsdp_ratio;
    for (int r = 0; r < iters; ++r) {
      double rs = 0;
      for (std::size_t block : kBlocks) {
        resident.push_back(evict(dir));
        const auto [s, rb] = plain_read(dir, block);
        FSDP_CHECK(rb == bytes, RuntimeError, "read {} bytes of {}", rb, bytes);
        block_s[block].push_back(s);
        rs = rs > 0 ? std::min(rs, s) : s;
      }
      read_s.push_back(rs);
      resident.push_back(evict(dir));
      t0 = bench::wall_now_ms();
      {
        const auto model = models::from_pretrained(dir.string());
        load_s.push_back(seconds_since(t0));
      }
      load_ratio.push_back(rs / load_s.back());
      if (ranks > 0) {
        resident.push_back(evict(dir));
        double wrap = 0;
        fsdp_s.push_back(fsdp_load(dir, ranks, wrap));
        wrap_s.push_back(wrap);
        fsdp_ratio.push_back(rs / fsdp_s.back());
      }
      fmt::print("round {}: disk read {:.3f} s ({:.0f} MB/s), from_pretrained {:.3f} s ({:.0f}%)",
                 r + 1, rs, bytes / 1e6 / rs, load_s.back(), 100 * load_ratio.back());
      if (ranks > 0)
        fmt::print(", FSDP {} ranks {:.3f} s ({:.0f}%; build and wrap {:.3f} s)", ranks,
                   fsdp_s.back(), 100 * fsdp_ratio.back(), wrap_s.back());
      fmt::print("\n");
      std::fflush(stdout);
    }
    double most_resident = 0;
    for (double x : resident) most_resident = std::max(most_resident, x);
    const double disk = median(read_s), load = median(load_s);
    fmt::print("{:<26} {:>9} {:>9} {:>14}\n", "", "s", "MB/s", "vs disk read");
    for (const auto& [block, secs] : block_s)
      fmt::print("{:<26} {:>9.3f} {:>9.0f} {:>14}\n",
                 fmt::format("read() {} MiB blocks", block >> 20), median(secs),
                 bytes / 1e6 / median(secs), "");
    fmt::print("{:<26} {:>9.3f} {:>9.0f} {:>14}\n", "disk (fastest per round)", disk,
               bytes / 1e6 / disk, "");
    fmt::print("{:<26} {:>9.3f} {:>9.0f} {:>13.0f}%\n", "from_pretrained", load, bytes / 1e6 / load,
               100 * median(load_ratio));
    if (ranks > 0)
      fmt::print("{:<26} {:>9.3f} {:>9.0f} {:>13.0f}%\n", fmt::format("FSDP {} ranks", ranks),
                 median(fsdp_s), bytes / 1e6 / median(fsdp_s), 100 * median(fsdp_ratio));
    fmt::print("pages still cached after eviction: at most {:.1f}%; target >= 70% of the disk\n",
               100 * most_resident);

    bench::Report report(cli);
    report["model"] = {{"config", config}, {"bytes", bytes}, {"files", n_files}};
    report["dir"] = dir_arg;
    report["eviction"] = "fdatasync + posix_fadvise(POSIX_FADV_DONTNEED)";
    report["max_resident_after_evict"] = most_resident;
    for (const auto& [block, secs] : block_s)
      report.row({{"path", fmt::format("read() {} MiB blocks", block >> 20)}, {"seconds", secs}});
    report.row({{"path", "disk (fastest per round)"}, {"seconds", read_s}});
    report.row({{"path", "from_pretrained"}, {"seconds", load_s}});
    report.ratio("from_pretrained_vs_disk", median(load_ratio));
    if (ranks > 0) {
      report.row({{"path", fmt::format("fsdp {} ranks", ranks)},
                  {"seconds", fsdp_s},
                  {"wrap_seconds", wrap_s}});
      report.ratio(fmt::format("fsdp_{}r_vs_disk", ranks), median(fsdp_ratio));
    }
    if (!keep) fs::remove_all(dir);
    report.write();
    return 0;
  });
}
