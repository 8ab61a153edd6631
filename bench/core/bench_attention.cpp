// Attention forward + backward on (B*H, L, 64) heads under a causal mask: the materialised path
// (bmm, mask, softmax, bmm: holds B*H x L x L scores and probabilities) against blocked_attention
// (key blocks, online softmax) and scaled_dot_product_attention (the same kernel with is_causal:
// no mask tensor, the blocks above the diagonal skipped), per sequence length. Shows where
// MultiheadAttention's switch (kBlockedAttentionMinKeys) belongs and the score memory the blocked
// paths do not hold. bench_attention_torch.py times torch's scaled_dot_product_attention alike.
#include <fmt/format.h>

#include <vector>

#include "bench/common/cli.h"
#include "bench/common/report.h"
#include "bench/common/timing.h"
#include "core/autograd.h"
#include "core/blas_kernels.h"
#include "core/nn/transformer.h"
#include "core/ops.h"
#include "core/ops/blocked_attention.h"

using namespace fsdp;

namespace {

enum class Path { Materialised, Blocked, Sdpa };

double time_attention(std::int64_t bh, std::int64_t len, Path path, int warmup, int iters) {
  manual_seed(0);
  Tensor q = randn({bh, len, 64}).requires_grad_(), k = randn({bh, len, 64}).requires_grad_();
  Tensor v = randn({bh, len, 64}).requires_grad_();
  Tensor mask = nn::Transformer::generate_square_subsequent_mask(len);
  return bench::median_ms(
             [&] {
               Tensor out;
               if (path == Path::Sdpa) {
                 out = scaled_dot_product_attention(q.view({1, bh, len, 64}),
                                                    k.view({1, bh, len, 64}),
                                                    v.view({1, bh, len, 64}), {}, true);
               } else if (path == Path::Blocked) {
                 out = blocked_attention(q, k, v, mask);
               } else {
                 Tensor s = add(mask, bmm(q, k.transpose(1, 2)));
                 out = bmm(softmax(s, -1), v);
               }
               sum(out).backward();
             },
             warmup, iters)
      .wall_ms;
}

}  // namespace

int main(int argc, char** argv) {
  select_blas_kernels(argv);
  bench::Cli cli("bench_attention",
                 "attention: materialised vs blocked (online softmax), forward + backward");
  int iters = 5, warmup = 1, threads = 1;
  std::int64_t bh = 8;
  std::vector<std::int64_t> lengths{128, 256, 512, 1024, 2048};
  cli.add_iters(iters);
  cli.add_warmup(warmup);
  cli.add_threads(threads, "OpenBLAS threads");
  cli.app().add_option("--heads", bh, "batch x heads")->capture_default_str();
  cli.app().add_option("--lengths", lengths)->delimiter(',')->capture_default_str();
  if (const int rc = cli.parse(argc, argv); rc >= 0) return rc;
  return bench::run_main(cli.program(), [&] {
    set_blas_threads(threads);
    bench::Report report(cli);
    report["heads"] = bh;
    fmt::print("{:>6} {:>16} {:>12} {:>8} {:>10} {:>20}\n", "L", "materialised ms", "blocked ms",
               "ratio", "sdpa ms", "scores not held MiB");
    for (std::int64_t len : lengths) {
      const double full = time_attention(bh, len, Path::Materialised, warmup, iters);
      const double blocked = time_attention(bh, len, Path::Blocked, warmup, iters);
      const double sdpa = time_attention(bh, len, Path::Sdpa, warmup, iters);
      // Scores and probabilities, float, held from forward to backward by the materialised path.
      const double mib = 2.0 * static_cast<double>(bh * len * len) * 4 / (1 << 20);
      fmt::print("{:>6} {:>16.2f} {:>12.2f} {:>8.2f} {:>10.2f} {:>20.1f}\n", len, full, blocked,
                 blocked / full, sdpa, mib);
      report.row({{"length", len},
                  {"materialised_ms", full},
                  {"blocked_ms", blocked},
                  {"sdpa_ms", sdpa},
                  {"scores_not_held_mib", mib}});
      report.ratio(fmt::format("blocked_vs_materialised_L{}", len), blocked / full);
      report.ratio(fmt::format("sdpa_vs_materialised_L{}", len), sdpa / full);
    }
    report.write();
    return 0;
  });
}
