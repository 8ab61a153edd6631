// What bounds a training step of the GPT of examples/train_gpt on one core: its matrix products.
// Records every product one forward + backward makes (core/gemm_recorder.h), replays them alone
// through OpenBLAS (same shapes and transposes, in order, on warm buffers: no element-wise work,
// no allocation, no autograd), and compares with the whole step (forward + backward + AdamW).
// The replay's time is a floor under any step that does the same products with this BLAS, so
// tokens per step / replay time is a ceiling on tokens/s per core; with --versus R and --ranks W
// it says what W ranks at that ceiling (perfect scaling, free communication) make against R.
// A large square product gives this core's sgemm rate for reference.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "bench/common/cli.h"
#include "bench/common/report.h"
#include "bench/common/timing.h"
#include "core/autograd.h"
#include "core/blas_kernels.h"
#include "core/gemm_recorder.h"
#include "core/kernels/cpu/blas_gemm.h"
#include "core/ops.h"
#include "core/optim/optim.h"
#include "core/parallel.h"
#include "examples/gpt.h"

extern "C" char* openblas_get_corename(void);

using namespace fsdp;

namespace {

// Every float product of `calls`, in order, on buffers large enough for the largest.
void replay(const std::vector<GemmCall>& calls, std::vector<float>& a, std::vector<float>& b,
            std::vector<float>& c) {
  for (const auto& g : calls)
    ops_detail::blas_gemm<float>(g.trans_a, g.trans_b, g.m, g.n, g.k, a.data(),
                                 g.trans_a ? g.m : g.k, b.data(), g.trans_b ? g.k : g.n,
                                 g.beta_zero ? 0.0f : 1.0f, c.data(), g.n);
}

int run(const bench::Cli& cli, const examples::GPTConfig& cfg, std::int64_t batch, int warmup,
        int iters, int ranks, double versus, double target) {
  set_blas_threads(1);
  set_num_threads(1);
  manual_seed(0);
  examples::GPT model(cfg);
  examples::gpt_init(model);
  optim::AdamW opt(model.parameters(), optim::AdamWOptions{});
  const Tensor idx = randint(0, cfg.vocab, {batch, cfg.seq});
  const Tensor targets = randint(0, cfg.vocab, {batch, cfg.seq});
  auto step = [&] {
    opt.zero_grad();
    examples::gpt_loss(model, idx, targets).backward();
    opt.step();
  };
  const double step_s = bench::median_ms(step, warmup, iters).wall_ms * 1e-3;

  std::vector<GemmCall> calls;
  {
    GemmRecorder rec;
    step();
    calls = rec.calls();
  }
  FSDP_CHECK(!calls.empty(), RuntimeError, "bench_gemm_bound: the step made no matrix products");
  double flops = 0;
  std::size_t sa = 1, sb = 1, sc = 1;
  for (const auto& g : calls) {
    FSDP_CHECK(!g.is_double, RuntimeError, "bench_gemm_bound: a double product in a float model");
    flops += g.flops();
    sa = std::max<std::size_t>(sa, g.m * g.k);
    sb = std::max<std::size_t>(sb, g.k * g.n);
    sc = std::max<std::size_t>(sc, g.m * g.n);
  }
  std::vector<float> a(sa, 0.5f), b(sb, 0.25f), c(sc, 0.0f);
  const double gemm_s =
      bench::median_ms([&] { replay(calls, a, b, c); }, warmup, iters).wall_ms * 1e-3;

  const std::int64_t n = 1024;
  std::vector<float> sq_a(n * n, 0.5f), sq_b(n * n, 0.25f), sq_c(n * n);
  const double square_s =
      1e-3 * bench::median_ms(
                 [&] {
                   ops_detail::blas_gemm<float>(false, false, n, n, n, sq_a.data(), n, sq_b.data(),
                                                n, 0.0f, sq_c.data(), n);
                 },
                 warmup, std::max(iters, 5))
                 .wall_ms;
  const double square_gfs = 2.0 * n * n * n / square_s * 1e-9;

  const double tokens = static_cast<double>(batch * cfg.seq);
  const double ceiling = tokens / gemm_s;
  fmt::print("GPT L{} D{} H{} T{} V{}, batch {}: one core, OpenBLAS {} kernels\n", cfg.layers,
             cfg.d_model, cfg.heads, cfg.seq, cfg.vocab, batch, openblas_get_corename());
  fmt::print("  whole step (forward + backward + AdamW)  {:8.1f} ms  {:8.0f} tokens/s\n",
             step_s * 1e3, tokens / step_s);
  fmt::print(
      "  its {} matrix products alone             {:8.1f} ms  {:8.0f} tokens/s  "
      "({:.2f} GFLOP at {:.1f} GFLOP/s)\n",
      calls.size(), gemm_s * 1e3, ceiling, flops * 1e-9, flops / gemm_s * 1e-9);
  fmt::print("  products' share of the step              {:8.1f} %\n", 100 * gemm_s / step_s);
  fmt::print("  sgemm 1024^3 on this core                {:8.1f} GFLOP/s\n", square_gfs);
  bench::Report out(cli);
  out["config"] = {{"layers", cfg.layers}, {"d_model", cfg.d_model}, {"heads", cfg.heads},
                   {"seq", cfg.seq},       {"vocab", cfg.vocab},     {"batch", batch}};
  // Flat fields first (bench/fsdp/bench_fsdp_train.py reads them), then the table's rows.
  out["openblas_core"] = openblas_get_corename();
  out["step_ms"] = step_s * 1e3;
  out["gemm_ms"] = gemm_s * 1e3;
  out["gemm_calls"] = calls.size();
  out["gemm_gflop"] = flops * 1e-9;
  out["gemm_gflops_per_s"] = flops / gemm_s * 1e-9;
  out["square_gflops_per_s"] = square_gfs;
  out["ceiling_tokens_per_s"] = ceiling;
  out.row({{"name", "step"}, {"ms", step_s * 1e3}, {"tokens_per_s", tokens / step_s}});
  out.row({{"name", "products"}, {"ms", gemm_s * 1e3}, {"tokens_per_s", ceiling}});
  out.ratio("products_share_of_step", gemm_s / step_s);
  if (versus > 0) {
    const double best = ranks * ceiling / versus;
    fmt::print(
        "  {} ranks at the ceiling, scaling perfectly: {:.0f} tokens/s = {:.2f} x {:.0f}{}\n",
        ranks, ranks * ceiling, best, versus,
        target > 0 ? fmt::format(" (asked: {:.2f} x; {})", target,
                                 best >= target ? "within reach" : "out of reach")
                   : "");
    out["versus_tokens_per_s"] = versus;
    out["ranks"] = ranks;
    out["ranks_at_ceiling_ratio"] = best;
    out.ratio("ranks_at_ceiling_vs_versus", best);
  }
  out.write();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  select_blas_kernels(argv);  // Debian's OpenBLAS picks SSE3 kernels on some CPUs otherwise
  bench::Cli cli("bench_gemm_bound",
                 "the matrix products of a GPT training step, alone: a ceiling on tokens/s");
  CLI::App& app = cli.app();
  examples::GPTConfig cfg;
  std::int64_t batch = 8;
  int warmup = 2, iters = 10, ranks = 2;
  double versus = 0, target = 0;
  app.add_option("--layers", cfg.layers)->capture_default_str();
  app.add_option("--d-model", cfg.d_model)->capture_default_str();
  app.add_option("--heads", cfg.heads)->capture_default_str();
  app.add_option("--seq", cfg.seq)->capture_default_str();
  app.add_option("--vocab", cfg.vocab)->capture_default_str();
  app.add_option("--batch", batch, "sequences per step (per rank)")->capture_default_str();
  cli.add_warmup(warmup);
  cli.add_iters(iters);
  app.add_option("--versus", versus, "tokens/s to compare W ranks at the ceiling with");
  app.add_option("--ranks", ranks, "W, for --versus")->capture_default_str();
  app.add_option("--target", target, "the ratio to --versus that is asked for");
  if (const int rc = cli.parse(argc, argv); rc >= 0) return rc;
  return bench::run_main(
      cli.program(), [&] { return run(cli, cfg, batch, warmup, iters, ranks, versus, target); });
}
