// Page faults (getrusage ru_minflt) and time per step after the first, with the caching CPU
// allocator (core/caching_allocator.h) and the plain one (aligned_alloc/free), measured in the
// same run, alternating, median of --iters runs:
//   cycle: an unshard/reshard-like loop: per unit, allocate its unsharded buffer, write every
//          page, allocate and write an activation-sized and a gradient-sized buffer, free them
//          (FSDP frees the unsharded parameter with Storage::resize(0));
//   train_gpt: examples/gpt_train.h's FSDP training (FULL_SHARD, 2 ranks as threads).
// Prints a table and writes JSON (--json PATH); --timeline FILE.svg draws one cycle step's
// memory timeline by category (core/memory_timeline_svg.h).
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/common/cli.h"
#include "bench/common/report.h"
#include "bench/common/timing.h"
#include "comm/threads/run_ranks.h"
#include "core/blas_kernels.h"
#include "core/memory.h"
#include "core/memory_timeline.h"
#include "core/memory_timeline_svg.h"
#include "examples/gpt_train.h"

using namespace fsdp;

namespace {

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

using bench::median;

struct PerStep {
  double faults = 0;       // minor page faults per step, steps after the first
  double last_faults = 0;  // in the last step
  double ms = 0;           // milliseconds per step, steps after the first
  double misses = 0;       // allocations per step the allocator took from the system
  std::int64_t reserved_peak = 0, allocated_peak = 0;
};

void touch(Storage& s) {
  auto* p = static_cast<unsigned char*>(s.data());
  for (std::size_t i = 0; i < s.nbytes(); i += 4096) p[i] = static_cast<unsigned char>(i);
}

// One cycle step over `units` (bytes of each unit's unsharded parameters): per unit, unshard,
// compute (an activation 2x and a gradient 1x the unit), reshard.
void cycle_step(std::vector<std::unique_ptr<Storage>>& unsharded,
                const std::vector<std::size_t>& units) {
  for (std::size_t u = 0; u < units.size(); ++u) {
    mark_memory_event(fmt::format("unit {}", u));
    {
      MemoryCategoryScope c(MemoryCategory::Parameters);
      unsharded[u]->resize(units[u]);
    }
    touch(*unsharded[u]);
    std::unique_ptr<Storage> act, grad;
    {
      MemoryCategoryScope c(MemoryCategory::Activations);
      act = std::make_unique<Storage>(2 * units[u], kCPU);
    }
    touch(*act);
    {
      MemoryCategoryScope c(MemoryCategory::Gradients);
      grad = std::make_unique<Storage>(units[u], kCPU);
    }
    touch(*grad);
    unsharded[u]->resize(0);
  }
}

PerStep run_cycle(CpuAllocatorKind kind, const std::vector<std::size_t>& units, int steps) {
  set_cpu_allocator(kind);
  std::vector<std::unique_ptr<Storage>> unsharded;
  for (std::size_t i = 0; i < units.size(); ++i)
    unsharded.push_back(std::make_unique<Storage>(0, kCPU));
  reset_allocator_peak_stats();
  cycle_step(unsharded, units);  // the first step takes its pages from the system
  long f0 = minor_faults(), f_before_last = f0;
  double t0 = bench::wall_now_ms();
  std::int64_t m0 = allocator_stats().num_system_allocs;
  for (int s = 1; s < steps; ++s) {
    f_before_last = minor_faults();
    cycle_step(unsharded, units);
  }
  PerStep r;
  r.last_faults = double(minor_faults() - f_before_last);
  r.misses = double(allocator_stats().num_system_allocs - m0) / (steps - 1);
  r.faults = double(minor_faults() - f0) / (steps - 1);
  r.ms = (bench::wall_now_ms() - t0) / (steps - 1);
  AllocatorStats st = allocator_stats();
  r.reserved_peak = st.reserved_bytes_peak;
  r.allocated_peak = st.allocated_bytes_peak;
  empty_cache();
  return r;
}

PerStep run_train(CpuAllocatorKind kind, const examples::GPTTrainConfig& base, int ranks) {
  set_cpu_allocator(kind);
  reset_allocator_peak_stats();
  long f_first = 0, f_last = 0, f_before_last = 0;
  std::int64_t m_first = 0, m_last = 0;
  double t_first = 0, t_last = 0;
  examples::GPTTrainConfig cfg = base;
  // Rank 0 reports the process's faults (every rank thread's) at the end of each step.
  cfg.on_step = [&](int step, double) {
    if (step == 0) {
      f_first = minor_faults();
      t_first = bench::wall_now_ms();
      m_first = allocator_stats().num_system_allocs;
    }
    f_before_last = f_last;
    f_last = minor_faults();
    t_last = bench::wall_now_ms();
    m_last = allocator_stats().num_system_allocs;
  };
  comm::run_ranks(ranks, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    examples::GPTTrainConfig c = cfg;
    if (pg->rank() != 0) c.on_step = nullptr;
    examples::train_gpt(c, pg);
  });
  PerStep r;
  r.faults = double(f_last - f_first) / (base.steps - 1);
  r.last_faults = double(f_last - f_before_last);
  r.ms = (t_last - t_first) / (base.steps - 1);
  r.misses = double(m_last - m_first) / (base.steps - 1);
  AllocatorStats st = allocator_stats();
  r.reserved_peak = st.reserved_bytes_peak;
  r.allocated_peak = st.allocated_bytes_peak;
  empty_cache();
  return r;
}

struct Summary {
  PerStep caching, malloc;
};

// Runs `fn(kind)` repeats times per allocator, alternating, and keeps the medians.
template <typename Fn>
Summary measure(int repeats, Fn&& fn) {
  std::vector<PerStep> runs[2];
  for (int i = 0; i < repeats; ++i)
    for (CpuAllocatorKind k : {CpuAllocatorKind::Malloc, CpuAllocatorKind::Caching})
      runs[int(k)].push_back(fn(k));
  auto med = [](const std::vector<PerStep>& v) {
    PerStep m;
    std::vector<double> f, l, t, s;
    for (const auto& r : v)
      f.push_back(r.faults), l.push_back(r.last_faults), t.push_back(r.ms), s.push_back(r.misses);
    m.faults = median(f);
    m.last_faults = median(l);
    m.ms = median(t);
    m.misses = median(s);
    m.reserved_peak = v.back().reserved_peak;
    m.allocated_peak = v.back().allocated_peak;
    return m;
  };
  return {med(runs[int(CpuAllocatorKind::Caching)]), med(runs[int(CpuAllocatorKind::Malloc)])};
}

nlohmann::json to_json(const PerStep& p) {
  return {{"faults_per_step", p.faults},
          {"faults_last_step", p.last_faults},
          {"system_allocs_per_step", p.misses},
          {"ms_per_step", p.ms},
          {"reserved_peak_bytes", p.reserved_peak},
          {"allocated_peak_bytes", p.allocated_peak}};
}

void print_row(const std::string& name, const Summary& s) {
  fmt::print(
      "{:<34} {:>14.1f} {:>14.1f} {:>10.2f} {:>10.2f} {:>7.3f} {:>12.1f} {:>12.1f} {:>8.1f} "
      "{:>7.0f}\n",
      name, s.malloc.faults, s.caching.faults, s.malloc.ms, s.caching.ms,
      s.caching.ms / s.malloc.ms, s.malloc.reserved_peak / 1048576.0,
      s.caching.reserved_peak / 1048576.0, s.caching.misses, s.caching.last_faults);
}

}  // namespace

int main(int argc, char** argv) {
  select_blas_kernels(argv);  // as train_gpt: may re-execute with OPENBLAS_CORETYPE set
  bench::Cli cli("bench_memory", "page faults and step time, caching vs plain CPU allocator");
  CLI::App& app = cli.app();
  int repeats = 5, cycle_steps = 20, train_steps = 8, ranks = 2;
  std::string timeline_path;
  bool skip_train = false;
  cli.add_iters(repeats, "runs per allocator (medians)");
  app.add_option("--cycle-steps", cycle_steps, "steps per cycle run (the first is not counted)")
      ->check(bench::at_least(2))
      ->capture_default_str();
  app.add_option("--train-steps", train_steps, "steps per train_gpt run (the first is not counted)")
      ->check(bench::at_least(3))
      ->capture_default_str();
  app.add_option("--ranks", ranks, "train_gpt ranks (threads)")
      ->check(bench::at_least(1))
      ->capture_default_str();
  app.add_flag("--skip-train", skip_train, "only the synthetic cycle");
  app.add_option("--timeline", timeline_path, "write one cycle step's memory timeline (SVG)");
  if (const int rc = cli.parse(argc, argv); rc >= 0) return rc;
  return bench::run_main(cli.program(), [&] {
    set_blas_threads(1);  // one BLAS thread per rank, as train_gpt's default
    const CpuAllocatorKind initial = cpu_allocator_kind();

    // Unit sizes of a GPT-like model: embeddings, 6 blocks of 3 MiB and a 40 MiB one (above
    // glibc's largest dynamic mmap threshold, 32 MiB, so malloc always maps it afresh).
    const std::vector<std::size_t> units = {1 << 20, 3 << 20, 3 << 20, 3 << 20,
                                            3 << 20, 3 << 20, 3 << 20, 40 << 20};
    const char* header = "{:<34} {:>14} {:>14} {:>10} {:>10} {:>7} {:>12} {:>12} {:>8} {:>7}\n";
    fmt::print(fmt::runtime(header), "benchmark", "faults malloc", "faults caching", "ms malloc",
               "ms caching", "ratio", "reserved MiB", "reserved MiB", "misses", "faults");
    fmt::print(fmt::runtime(header), "", "(per step)", "(per step)", "", "", "c/m", "malloc",
               "caching", "caching", "last c");
    Summary cycle =
        measure(repeats, [&](CpuAllocatorKind k) { return run_cycle(k, units, cycle_steps); });
    print_row("unshard/reshard cycle (8 units)", cycle);
    bench::Report out(cli);
    out["conditions"] = fmt::format("medians of {} alternating runs", repeats);
    out.row({{"benchmark", "cycle"},
             {"caching", to_json(cycle.caching)},
             {"malloc", to_json(cycle.malloc)}});
    out.ratio("cycle_ms_caching_vs_malloc", cycle.caching.ms / cycle.malloc.ms);

    if (!skip_train) {
      examples::GPTTrainConfig cfg;
      cfg.steps = train_steps;
      auto data = std::make_shared<std::string>(1 << 20, '\0');
      for (std::size_t i = 0; i < data->size(); ++i)
        (*data)[i] = static_cast<char>('a' + (i * 2654435761u >> 13) % 26);
      cfg.data = std::shared_ptr<const std::string>(std::move(data));
      Summary train =
          measure(repeats, [&](CpuAllocatorKind k) { return run_train(k, cfg, ranks); });
      print_row(
          fmt::format("train_gpt L{} D{} {} rank(s)", cfg.model.layers, cfg.model.d_model, ranks),
          train);
      out.row({{"benchmark", "train_gpt"},
               {"caching", to_json(train.caching)},
               {"malloc", to_json(train.malloc)},
               {"ranks", ranks},
               {"steps", train_steps}});
      out.ratio("train_gpt_ms_caching_vs_malloc", train.caching.ms / train.malloc.ms);
    }

    if (!timeline_path.empty()) {
      set_cpu_allocator(CpuAllocatorKind::Caching);
      std::vector<std::unique_ptr<Storage>> unsharded;
      for (std::size_t i = 0; i < units.size(); ++i)
        unsharded.push_back(std::make_unique<Storage>(0, kCPU));
      cycle_step(unsharded, units);  // warm: the recorded step is a steady one
      auto timeline = std::make_shared<MemoryTimeline>();
      {
        MemoryTimelineScope recording(timeline);
        cycle_step(unsharded, units);
      }
      MemoryTimelineSvgOptions o;
      o.title = "bench_memory: one unshard/reshard cycle step";
      write_memory_timeline_svg(*timeline, timeline_path, o);
      fmt::print("timeline: {}\n", timeline_path);
    }
    set_cpu_allocator(initial);
    out.write();
    return 0;
  });
}
