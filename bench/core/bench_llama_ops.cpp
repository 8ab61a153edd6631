// The ops of a Llama decoder block outside its matrix products, forward + backward at one
// block's shapes: rms_norm, SwiGLU's silu(gate) * up, apply_rotary on a transposed (B, S, H, D)
// projection, causal grouped-query scaled_dot_product_attention. bench_llama_ops_torch.py times
// transformers' formulas (LlamaRMSNorm, apply_rotary_pos_emb) and torch's sdpa on the same
// shapes and threads; issue 26's tokens/s target needs each of these at least at par.
#include <fmt/format.h>

#include <functional>
#include <vector>

#include "bench/common/cli.h"
#include "bench/common/report.h"
#include "bench/common/timing.h"
#include "core/autograd.h"
#include "core/blas_kernels.h"
#include "core/ops.h"
#include "core/parallel.h"

using namespace fsdp;

namespace {

struct Shapes {
  std::int64_t batch = 2, seq = 512, heads = 16, kv_heads = 4, head_dim = 64, inter = 2816;
  std::int64_t hidden() const { return heads * head_dim; }
};

Tensor leaf(const Shape& shape) {
  return randn(shape).requires_grad_();
}

// name -> one forward + backward of that op.
std::vector<std::pair<std::string, std::function<void()>>> cases(const Shapes& s) {
  const std::int64_t B = s.batch, S = s.seq, H = s.heads, KV = s.kv_heads, D = s.head_dim;
  Tensor x = leaf({B * S, s.hidden()}), w = leaf({s.hidden()});
  Tensor gate = leaf({B * S, s.inter}), up = leaf({B * S, s.inter});
  Tensor proj = leaf({B, S, H, D});
  auto [cos, sin] = rotary_cos_sin(rotary_inv_freq(D, 5e5), 0, S, DType::Float32);
  Tensor q = leaf({B, H, S, D}), k = leaf({B, KV, S, D}), v = leaf({B, KV, S, D});
  return {
      {"rms_norm", [=] { sum(rms_norm(x, w, 1e-5)).backward(); }},
      {"swiglu", [=] { sum(mul(silu(gate), up)).backward(); }},
      {"rotary", [=] { sum(apply_rotary(transpose(proj, 1, 2), cos, sin)).backward(); }},
      {"sdpa_gqa_causal",
       [=] { sum(scaled_dot_product_attention(q, k, v, {}, true, {}, true)).backward(); }},
  };
}

}  // namespace

int main(int argc, char** argv) {
  select_blas_kernels(argv);
  bench::Cli cli("bench_llama_ops", "a Llama block's non-GEMM ops, forward + backward");
  int iters = 5, warmup = 1, threads = 1;
  Shapes s;
  cli.add_iters(iters);
  cli.add_warmup(warmup);
  cli.add_threads(threads, "intra-op and OpenBLAS threads");
  cli.app().add_option("--seq", s.seq, "sequence length")->capture_default_str();
  if (const int rc = cli.parse(argc, argv); rc >= 0) return rc;
  return bench::run_main(cli.program(), [&] {
    set_blas_threads(threads);
    set_num_threads(threads);
    manual_seed(0);
    bench::Report report(cli);
    fmt::print("{:>18} {:>10}\n", "op", "ms");
    for (auto& [name, fn] : cases(s)) {
      const double ms = bench::median_ms(fn, warmup, iters).wall_ms;
      fmt::print("{:>18} {:>10.2f}\n", name, ms);
      report.row({{"op", name}, {"ms", ms}});
    }
    report.write();
    return 0;
  });
}
