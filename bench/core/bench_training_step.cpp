// Times forward + backward + AdamW step of (a) one transformer block (d_model 256, 4 heads,
// seq 128, batch 8) and (b) the demo model, and compares with PyTorch eager on the same shapes
// and thread count, measured in the same run by bench_training_step_torch.py. PyTorch comes from
// --torch-python (default /opt/torch2/bin/python, a current PyTorch); when that cannot import
// torch the benchmark falls back to /usr/bin/python3 (Debian's 1.13, about 3x slower) and says
// so loudly. Prints a table per thread count and writes JSON (--json PATH).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/common/cli.h"
#include "bench/common/report.h"
#include "bench/common/timing.h"
#include "bench/common/torch_python.h"
#include "core/autograd.h"
#include "core/blas_kernels.h"
#include "core/nn/nn.h"
#include "core/optim/optim.h"
#include "core/parallel.h"
#include "examples/tiny_lm.h"

extern "C" char* openblas_get_corename(void);

using namespace fsdp;

namespace {

using bench::median_ms;
using bench::Timing;

Timing bench_block(int warmup, int iters) {
  manual_seed(0);
  nn::TransformerEncoderLayerOptions o;
  o.dim_feedforward = 1024;
  o.dropout = 0.0;
  o.batch_first = true;
  nn::TransformerEncoderLayer block(256, 4, o);
  optim::AdamW opt(block.parameters(), optim::AdamWOptions{});
  Tensor x = randn({8, 128, 256});
  return median_ms(
      [&] {
        opt.zero_grad();
        Tensor y = block.forward(x);
        sum(y).backward();
        opt.step();
      },
      warmup, iters);
}

Timing bench_demo_model(int warmup, int iters) {
  manual_seed(0);
  examples::TinyLMConfig cfg;  // the demo's defaults
  examples::TinyLM model(cfg);
  optim::AdamW opt(model.parameters(), optim::AdamWOptions{});
  Tensor window = randint(0, 256, {16, cfg.context + 1});
  return median_ms(
      [&] {
        opt.zero_grad();
        examples::lm_loss(model, window).backward();
        opt.step();
      },
      warmup, iters);
}

nlohmann::json run_torch(const std::string& python, const std::string& script, int threads,
                         int warmup, int iters) {
  std::string out =
      bench::run_command(fmt::format("{} {} --threads {} --warmup {} --iters {} 2>/dev/null",
                                     python, script, threads, warmup, iters));
  try {
    return nlohmann::json::parse(out);
  } catch (...) {
    return nullptr;
  }
}

const char* label(const std::string& name) {
  return name == "block" ? "transformer block d256 h4 seq128 batch8"
                         : "demo TinyLM (d128 h4 L2 ctx64 batch16)";
}

}  // namespace

int main(int argc, char** argv) {
  select_blas_kernels(argv);  // Debian's OpenBLAS picks SSE3 kernels on this CPU otherwise
  bench::Cli cli("bench_training_step", "fsdp-cpp training-step benchmark vs PyTorch eager");
  CLI::App& app = cli.app();
  int warmup = 3, iters = 20;
  std::vector<int> thread_counts{1, 2};
  std::string torch_script = FSDP_BENCH_DIR "/bench_training_step_torch.py";
  std::string torch_python = "/opt/torch2/bin/python";
  std::string model = "both";
  bool no_torch = false, no_pool = false;
  cli.add_warmup(warmup);
  cli.add_iters(iters);
  cli.add_threads(thread_counts,
                  "thread counts: OpenBLAS threads here, torch.set_num_threads there");
  app.add_option("--torch-python", torch_python,
                 "python with a current torch (falls back to /usr/bin/python3)")
      ->capture_default_str();
  app.add_flag("--no-pool", no_pool,
               "element-wise kernels on one thread (matrix products still use OpenBLAS's threads)");
  app.add_flag("--no-torch", no_torch, "skip the PyTorch baseline");
  app.add_option("--model", model, "block, demo or both (one model: for profiling)")
      ->check(CLI::IsMember({"block", "demo", "both"}))
      ->capture_default_str();
  if (const int rc = cli.parse(argc, argv); rc >= 0) return rc;
  return bench::run_main(cli.program(), [&] {
    bench::Report result(cli);
    result["openblas_core"] = openblas_get_corename();
    std::string python, version;
    if (!no_torch) {
      const auto found = bench::find_torch_python({torch_python, "/usr/bin/python3"});
      bench::warn_unless_preferred(found, torch_python);
      python = found.python;
      version = found.version;
      result["torch_python"] = python;
      result["torch_version"] = version;
    }
    fmt::print("OpenBLAS core: {}; median of {} steps after {} warm-up steps\n",
               openblas_get_corename(), iters, warmup);
    for (int threads : thread_counts) {
      set_blas_threads(threads);
      set_num_threads(no_pool ? 1 : threads);  // the intra-op pool (core/parallel.h)
      nlohmann::ordered_json row;
      row["threads"] = threads;
      const Timing none{0, 0};
      const Timing block = model != "demo" ? bench_block(warmup, iters) : none;
      const Timing demo = model != "block" ? bench_demo_model(warmup, iters) : none;
      row["ours_ms"] = {{"block", block.wall_ms}, {"demo_model", demo.wall_ms}};
      row["ours_cpu_ms"] = {{"block", block.cpu_ms}, {"demo_model", demo.cpu_ms}};
      nlohmann::json torch = python.empty()
                                 ? nlohmann::json(nullptr)
                                 : run_torch(python, torch_script, threads, warmup, iters);
      row["torch_ms"] = torch;
      fmt::print("\n{:<42} {:>9} {:>9} {:>7} {:>9} {:>9} {:>7}\n",
                 fmt::format("fwd+bwd+AdamW step, {} thread{}", threads, threads == 1 ? "" : "s"),
                 "ours ms", "torch ms", "ratio", "ours cpu", "torch cpu", "ratio");
      for (const std::string name : {"block", "demo_model"}) {
        const double ours = row["ours_ms"][name], ours_cpu = row["ours_cpu_ms"][name];
        const bool measured = name == "block" ? model != "demo" : model != "block";
        if (measured && torch.is_object() && torch.contains(name)) {
          const double t = torch[name], tc = torch.value(name + "_cpu", 0.0);
          row["ratio"][name] = ours / t;
          row["cpu_ratio"][name] = tc > 0 ? ours_cpu / tc : 0.0;
          result.ratio(fmt::format("{}_vs_torch_{}t", name, threads), ours / t);
          if (tc > 0)
            result.ratio(fmt::format("{}_cpu_vs_torch_{}t", name, threads), ours_cpu / tc);
          fmt::print("{:<42} {:>9.2f} {:>9.2f} {:>7.2f} {:>9.2f} {:>9.2f} {:>7.2f}\n", label(name),
                     ours, t, ours / t, ours_cpu, tc, tc > 0 ? ours_cpu / tc : 0.0);
        } else {
          fmt::print("{:<42} {:>9.2f} {:>9} {:>7} {:>9.2f} {:>9} {:>7}\n", label(name), ours, "n/a",
                     "n/a", ours_cpu, "n/a", "n/a");
        }
      }
      if (torch.is_object())
        fmt::print("(torch {} from {}, {} threads; cpu = CPU ms per step, all threads)\n",
                   torch.value("version", "?"), python, threads);
      result.row(row);
    }
    result.write();
    return 0;
  });
}
