// Activation checkpointing on the GPT of examples/train_gpt, in one run: no checkpointing, full
// checkpointing of every block (CheckpointWrapper through apply_activation_checkpointing), and
// selective checkpointing (every block, saving the outputs of the matrix products and
// recomputing the rest). For each: the memory held between forward and backward (the saved
// activations), the peak over forward + backward above the step's start (activations, the
// recomputed block, the gradients), and the median time of a training step (forward, backward,
// AdamW); ratios against no checkpointing. The losses of the three runs are compared step by step
// (they must be equal). Prints a table; --json writes JSON.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench/common/cli.h"
#include "bench/common/report.h"
#include "bench/common/timing.h"
#include "core/blas_kernels.h"
#include "core/memory.h"
#include "core/ops.h"
#include "core/optim/optim.h"
#include "core/parallel.h"
#include "examples/gpt.h"
#include "ops/checkpoint_wrapper.h"

using namespace fsdp;

namespace {

struct Result {
  std::string name;
  std::int64_t recomputes = 0;  // checkpoint recomputations in one step
  std::int64_t held_bytes = 0;  // allocated during forward and still alive at its end
  std::int64_t peak_bytes = 0;  // peak above the step's start over forward + backward (it
                                // includes the gradients backward allocates, the same in all)
  double step_ms = 0;
  std::vector<double> losses;
};

// One model under one variant, with its optimizer and data.
struct Run {
  Result r;
  std::shared_ptr<examples::GPT> model;
  std::unique_ptr<optim::AdamW> opt;
  Tensor inputs, targets;

  Run(const std::string& variant, const examples::GPTConfig& cfg, std::int64_t batch) {
    r.name = variant;
    manual_seed(0);
    model = std::make_shared<examples::GPT>(cfg);
    examples::gpt_init(*model);
    ops::checkpoint_activations(model, variant, nn::ClassSet{"TransformerEncoderLayer"});
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{});
    Generator data(1234);
    inputs = randint(0, cfg.vocab, {batch, cfg.seq}, DType::Int64, &data);
    targets = randint(0, cfg.vocab, {batch, cfg.seq}, DType::Int64, &data);
  }

  // One training step; returns its milliseconds.
  double step() {
    const double t0 = bench::wall_now_ms();
    opt->zero_grad();
    Tensor loss = examples::gpt_loss(*model, inputs, targets);
    loss.backward();
    opt->step();
    const double ms = bench::wall_now_ms() - t0;
    r.losses.push_back(loss.item());
    return ms;
  }

  // Memory of one forward + backward, counted from its start (parameters, gradients of earlier
  // steps and optimizer state are outside the scope).
  void measure_memory() {
    opt->zero_grad();
    const auto recomputes_before = ops::checkpoint_recompute_count();
    auto stats = std::make_shared<MemoryStats>();
    {
      MemoryStatsScope scope(stats);
      Tensor loss = examples::gpt_loss(*model, inputs, targets);
      r.held_bytes = stats->current_bytes.load();
      loss.backward();
      r.losses.push_back(loss.item());
    }
    r.peak_bytes = stats->peak_bytes.load();
    r.recomputes = ops::checkpoint_recompute_count() - recomputes_before;
    opt->step();
  }
};

}  // namespace

int main(int argc, char** argv) {
  select_blas_kernels(argv);  // as train_gpt: Debian's OpenBLAS picks SSE3 kernels on this CPU
  bench::Cli cli("bench_activation_checkpoint",
                 "activation checkpointing: memory and step time, none vs full vs selective");
  CLI::App& app = cli.app();
  examples::GPTConfig cfg;
  std::int64_t batch = 8;
  int warmup = 1, iters = 5, threads = 2;
  app.add_option("--layers", cfg.layers)->capture_default_str();
  app.add_option("--d-model", cfg.d_model)->capture_default_str();
  app.add_option("--heads", cfg.heads)->capture_default_str();
  app.add_option("--seq", cfg.seq)->capture_default_str();
  app.add_option("--batch", batch)->capture_default_str();
  cli.add_warmup(warmup);
  cli.add_iters(iters);
  cli.add_threads(threads, "BLAS threads and intra-op threads (core/parallel.h)");
  if (const int rc = cli.parse(argc, argv); rc >= 0) return rc;
  return bench::run_main(cli.program(), [&] {
    set_blas_threads(threads);
    set_num_threads(threads);  // element-wise kernels, as train_gpt sizes them

    // The variants' steps alternate, so a busy machine slows them alike.
    std::vector<std::unique_ptr<Run>> runs;
    for (const char* v : {"none", "full", "selective"})
      runs.push_back(std::make_unique<Run>(v, cfg, batch));
    for (int i = 0; i < warmup; ++i)
      for (auto& run : runs) run->step();  // also creates the optimizer state
    for (auto& run : runs) run->measure_memory();
    std::vector<std::vector<double>> ms(runs.size());
    for (int i = 0; i < iters; ++i)
      for (std::size_t k = 0; k < runs.size(); ++k) ms[k].push_back(runs[k]->step());
    std::vector<Result> results;
    for (std::size_t k = 0; k < runs.size(); ++k) {
      runs[k]->r.step_ms = bench::median(ms[k]);
      results.push_back(runs[k]->r);
    }
    const Result& base = results[0];

    bench::Report out(cli);
    out["config"] = {{"layers", cfg.layers}, {"d_model", cfg.d_model}, {"heads", cfg.heads},
                     {"seq", cfg.seq},       {"batch", batch},         {"threads", threads}};
    fmt::print(
        "GPT L{} d{} h{} seq{} batch{}, {} threads (BLAS and intra-op), median of {} steps\n",
        cfg.layers, cfg.d_model, cfg.heads, cfg.seq, batch, threads, iters);
    fmt::print("{:<10} {:>10} {:>10} {:>8} {:>10} {:>8} {:>10} {:>8} {:>12}\n", "variant",
               "recomputes", "held MiB", "held x", "peak MiB", "peak x", "step ms", "time x",
               "max |dloss|");
    for (const auto& r : results) {
      double dloss = 0;
      for (std::size_t i = 0; i < r.losses.size(); ++i)
        dloss = std::max(dloss, std::abs(r.losses[i] - base.losses[i]));
      const double held_x =
          static_cast<double>(r.held_bytes) / static_cast<double>(base.held_bytes);
      const double peak_x =
          static_cast<double>(r.peak_bytes) / static_cast<double>(base.peak_bytes);
      const double time_x = r.step_ms / base.step_ms;
      fmt::print(
          "{:<10} {:>10} {:>10.2f} {:>8.3f} {:>10.2f} {:>8.3f} {:>10.1f} {:>8.3f} {:>12.3g}\n",
          r.name, r.recomputes, r.held_bytes / 1048576.0, held_x, r.peak_bytes / 1048576.0, peak_x,
          r.step_ms, time_x, dloss);
      out.row({{"variant", r.name},
               {"held_bytes", r.held_bytes},
               {"peak_bytes", r.peak_bytes},
               {"step_ms", r.step_ms},
               {"held_ratio", held_x},
               {"peak_ratio", peak_x},
               {"time_ratio", time_x},
               {"max_loss_diff", dloss},
               {"losses", r.losses},
               {"recomputes_per_step", r.recomputes}});
      if (&r != &base) {
        out.ratio(r.name + "_held_vs_none", held_x);
        out.ratio(r.name + "_peak_vs_none", peak_x);
        out.ratio(r.name + "_time_vs_none", time_x);
      }
    }
    out.write();
    return 0;
  });
}
