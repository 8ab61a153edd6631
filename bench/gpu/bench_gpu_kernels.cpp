// Times core/cuda's kernels and cuBLASLt products at GPT-2 124M's shapes (D 768, 4D 3072,
// vocab 50304, H 12, T 1024; bf16 storage) with CUDA events (bench/common/cuda_timing.h): the
// median of --iters calls after --warmup calls, each call between its own pair of events. Prints
// one row per op; --json FILE writes bench/common's report with a row {"op", "ms", "flop"} per op,
// which bench/gpu/torch_ops.py reads to time the same ops with PyTorch in the same run and print
// both side by side. Exits 77 without a device.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/common/cli.h"
#include "bench/common/cuda_timing.h"
#include "bench/common/report.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/flash_attention.h"
#include "core/cuda/gemm.h"
#include "core/cuda/kernels.h"
#include "core/cuda/runtime.h"
#include "core/kernels/index_bounds.h"

namespace bench = fsdp::bench;
using namespace fsdp::cuda;

namespace {

// Device memory filled with random values: a 16M-value random block is generated once and copied
// over the buffer (GEMM speed depends on the data; constants and zeros run faster).
template <typename T>
struct Buffer {
  T* ptr = nullptr;
  std::int64_t n = 0;
  explicit Buffer(std::int64_t count, float scale = 1.0f) : n(count) {
    FSDP_CUDA_CHECK(
        cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<std::int64_t>(n, 1) * sizeof(T)));
    static std::vector<float> block = [] {
      std::mt19937 g(1234);
      std::normal_distribution<float> d(0.0f, 1.0f);
      std::vector<float> v(1 << 24);
      for (float& x : v) x = d(g);
      return v;
    }();
    std::vector<T> host(std::min<std::int64_t>(n, block.size()));
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = T(block[i] * scale);
    for (std::int64_t off = 0; off < n; off += host.size()) {
      const std::int64_t len = std::min<std::int64_t>(host.size(), n - off);
      FSDP_CUDA_CHECK(cudaMemcpy(ptr + off, host.data(), len * sizeof(T), cudaMemcpyHostToDevice));
    }
    FSDP_CUDA_CHECK(cudaDeviceSynchronize());  // the timed stream does not wait for these copies
  }
  ~Buffer() { cudaFree(ptr); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// Times each op on the one stream, prints its row and adds it to the report.
struct OpTimer {
  int warmup = 3, iters = 20;
  cudaStream_t stream = nullptr;
  bench::Report* report = nullptr;
  void report_op(const std::string& name, double flop, const std::function<void()>& op) {
    const double ms = bench::cuda_median_ms(op, stream, warmup, iters);
    std::printf("%-28s %10.4f ms", name.c_str(), ms);
    if (flop > 0) std::printf("  %7.1f TFLOP/s", flop / ms / 1e9);
    std::printf("\n");
    report->row({{"op", name}, {"ms", ms}, {"flop", flop}});
  }
};

// The ops in order, after the checks that need no device; 77 without one.
int run(const bench::Cli& cli, OpTimer& timer, std::int64_t tokens) {
  const std::int64_t D = 768, F = 4 * D, V = 50304, H = 12, T = 1024, hd = D / H;
  const std::int64_t N = tokens, B = N / T, BH = B * H;
  if (N % T != 0)
    throw std::invalid_argument("--tokens " + std::to_string(N) +
                                " is not a multiple of T=" + std::to_string(T));
  std::string why;
  if (device_count(&why) == 0) {
    std::printf("bench_gpu_kernels: no CUDA device (%s): skipping\n", why.c_str());
    return 77;
  }
  const DeviceProperties p = device_properties(0);
  std::printf("device: %s (sm_%d%d, %d SMs); tokens %lld\n", p.name.c_str(), p.major, p.minor,
              p.multiprocessors, static_cast<long long>(N));
  bench::Report report(cli);
  report["device"] = {
      {"name", p.name}, {"sm", p.major * 10 + p.minor}, {"multiprocessors", p.multiprocessors}};
  report["tokens"] = N;
  timer.report = &report;

  Stream stream;
  timer.stream = stream.get();
  cudaStream_t s = stream.get();
  Gemm gemm;
  // A bf16 product C (m x n) = op(A) (m x k) . op(B) (k x n), row-major, dense.
  const auto product = [](const bf16* a, bool trans_a, const bf16* b, bool trans_b, bf16* c,
                          std::int64_t m, std::int64_t n, std::int64_t k) {
    GemmArgs g;
    g.precision = GemmPrecision::BF16;
    g.trans_a = trans_a;
    g.trans_b = trans_b;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = a;
    g.b = b;
    g.c = c;
    return g;
  };
  auto linear = [&](const bf16* x, const bf16* w, const bf16* bias, bf16* y, std::int64_t m,
                    std::int64_t n, std::int64_t k) {
    GemmArgs g = product(x, false, w, true, y, m, n, k);  // nn.Linear's weight is (out, in)
    g.bias = bias;
    g.epilogue = bias ? GemmEpilogue::Bias : GemmEpilogue::None;
    gemm.run(g, s);
  };
  {  // the four products of a block and the head
    Buffer<bf16> x(N * F, 0.1f), w(V * D, 0.02f), bias(V), y(N * V);
    timer.report_op("linear_qkv N,768->2304", 2.0 * N * D * 3 * D,
                    [&] { linear(x.ptr, w.ptr, bias.ptr, y.ptr, N, 3 * D, D); });
    timer.report_op("linear_fc N,768->3072", 2.0 * N * D * F,
                    [&] { linear(x.ptr, w.ptr, bias.ptr, y.ptr, N, F, D); });
    timer.report_op("linear_proj N,3072->768", 2.0 * N * F * D,
                    [&] { linear(x.ptr, w.ptr, bias.ptr, y.ptr, N, D, F); });
    timer.report_op("lm_head N,768->50304", 2.0 * N * D * V,
                    [&] { linear(x.ptr, w.ptr, nullptr, y.ptr, N, V, D); });
  }
  {  // the MLP's first linear backward (the kernel table's linear_backward16): gx = dy W, then
     // gW = dy^T x with gb = dy's column sums in its epilogue (BGRADB); without the epilogue
     // (ours only, to weigh it): the bias summed apart and cast, as where cuBLASLt has none
    Buffer<bf16> x(N * D), w(F * D, 0.02f), dy(N * F), gx(N * D), gw(F * D), gb(F);
    Buffer<float> sums(F);
    const auto backward = [&](bool fused) {
      gemm.run(product(dy.ptr, false, w.ptr, false, gx.ptr, N, D, F), s);
      GemmArgs wg = product(dy.ptr, true, x.ptr, false, gw.ptr, F, D, N);
      if (fused) {
        wg.epilogue = GemmEpilogue::BiasGradA;
        wg.bias = gb.ptr;
        if (gemm.try_run(wg, s)) return;
        wg.epilogue = GemmEpilogue::None;
        wg.bias = nullptr;
      }
      gemm.run(wg, s);
      sum_over_rows(dy.ptr, sums.ptr, N, F, s);
      cast(sums.ptr, gb.ptr, F, s);
    };
    timer.report_op("linear_fc_bwd N,768->3072", 4.0 * N * D * F, [&] { backward(true); });
    timer.report_op("linear_fc_bwd unfused bias", 4.0 * N * D * F, [&] { backward(false); });
  }
  {  // attention by GEMMs: scores = q k^T, then probs @ v
    Buffer<bf16> q(BH * T * hd), k(BH * T * hd), scores(BH * T * T), probs(BH * T * T),
        dprobs(BH * T * T), dscores(BH * T * T), o(BH * T * hd);
    GemmArgs g;
    g.precision = GemmPrecision::BF16;
    g.batch = BH;
    g.trans_b = true;
    g.m = T;
    g.n = T;
    g.k = hd;
    g.a = q.ptr;
    g.b = k.ptr;
    g.c = scores.ptr;
    g.stride_a = g.stride_b = T * hd;
    g.stride_c = T * T;
    timer.report_op("attn_scores bmm", 2.0 * BH * T * T * hd, [&] { gemm.run(g, s); });
    GemmArgs pv;
    pv.precision = GemmPrecision::BF16;
    pv.batch = BH;
    pv.m = T;
    pv.n = hd;
    pv.k = T;
    pv.a = probs.ptr;
    pv.b = k.ptr;
    pv.c = o.ptr;
    pv.stride_a = T * T;
    pv.stride_b = pv.stride_c = T * hd;
    timer.report_op("attn_probs_v bmm", 2.0 * BH * T * T * hd, [&] { gemm.run(pv, s); });
    const float scale = 1.0f / std::sqrt(float(hd));
    timer.report_op("causal_softmax_fwd", 0,
                    [&] { causal_softmax_forward(scores.ptr, probs.ptr, BH, T, scale, s); });
    {  // causal attention (the tiled kernels at bf16, hd 64), beside PyTorch's SDPA
      Buffer<bf16> v(BH * T * hd), dout(BH * T * hd), dq(BH * T * hd), dk(BH * T * hd),
          dv(BH * T * hd);
      Buffer<float> lse(BH * T);
      const FlashGeometry geo = dense_flash_geometry(BH, T, scale);
      // FLOPs as FlashAttention counts them: the causal half of 2 products forward, 5 backward
      // (our backward recomputes S and dP in both of its kernels: 7 done).
      const double fwd_flop = 4.0 * BH * T * T * hd / 2;
      timer.report_op("attention_fwd", fwd_flop, [&] {
        flash_attention_forward(q.ptr, k.ptr, v.ptr, o.ptr, lse.ptr, geo, s);
      });
      timer.report_op("attention_bwd", 2.5 * fwd_flop, [&] {
        flash_attention_backward(q.ptr, k.ptr, v.ptr, o.ptr, dout.ptr, lse.ptr, dq.ptr, dk.ptr,
                                 dv.ptr, geo, s);
      });
      // Grouped-query heads (3 query heads a kv head, as Llama 3's 32/8 or TinyLlama's 32/4 at
      // head dim 64): k, v and their gradients (B, H / 3, T, hd), the same FLOPs.
      FlashGeometry gqa = geo;
      const std::int64_t group = 3, kv = H / group;
      gqa.B = BH / H;
      gqa.H = H;
      gqa.group = group;
      for (AttentionOperandStrides* op : {&gqa.q, &gqa.o, &gqa.dout, &gqa.dq})
        *op = {.batch = H * T * hd, .head = T * hd, .row = hd};
      for (AttentionOperandStrides* op : {&gqa.k, &gqa.v, &gqa.dk, &gqa.dv})
        *op = {.batch = kv * T * hd, .head = T * hd, .row = hd};
      timer.report_op("attention_gqa_fwd H12/KV4", fwd_flop, [&] {
        flash_attention_forward(q.ptr, k.ptr, v.ptr, o.ptr, lse.ptr, gqa, s);
      });
      timer.report_op("attention_gqa_bwd H12/KV4", 2.5 * fwd_flop, [&] {
        flash_attention_backward(q.ptr, k.ptr, v.ptr, o.ptr, dout.ptr, lse.ptr, dq.ptr, dk.ptr,
                                 dv.ptr, gqa, s);
      });
      // Head dim 128 (the 7B-class Llamas' and Qwen3's): the same buffers as half as many heads
      // of twice the width, the same FLOPs; the wide tiles in dynamic shared memory.
      const FlashGeometry wide = dense_flash_geometry(BH / 2, T, 1.0f / std::sqrt(128.0f), 128);
      timer.report_op("attention_fwd hd128", fwd_flop, [&] {
        flash_attention_forward(q.ptr, k.ptr, v.ptr, o.ptr, lse.ptr, wide, s);
      });
      timer.report_op("attention_bwd hd128", 2.5 * fwd_flop, [&] {
        flash_attention_backward(q.ptr, k.ptr, v.ptr, o.ptr, dout.ptr, lse.ptr, dq.ptr, dk.ptr,
                                 dv.ptr, wide, s);
      });
    }
    timer.report_op("causal_softmax_bwd", 0, [&] {
      causal_softmax_backward(probs.ptr, dprobs.ptr, dscores.ptr, BH, T, scale, s);
    });
  }
  {  // layer norm, GELU, residual add, bias gradient
    Buffer<bf16> x(N * F), dy(N * F), y(N * F), dx(N * F);
    // bf16 parameters, as torch's here (and train_gpt's under bf16 FSDP mixed precision); the
    // backward's partial sums in a scratch buffer (the kernel table's comes from the allocator).
    Buffer<bf16> lw(D), lb(D), ldw(D), ldb(D);
    Buffer<float> mean(N), rstd(N), dw(F), scratch(layer_norm_backward_scratch(N, D));
    timer.report_op("layer_norm_fwd N,768", 0, [&] {
      layer_norm_forward<bf16, bf16>(x.ptr, lw.ptr, lb.ptr, y.ptr, mean.ptr, rstd.ptr, N, D, 1e-5f,
                                     s);
    });
    timer.report_op("layer_norm_bwd N,768", 0, [&] {
      layer_norm_backward<bf16, bf16>(dy.ptr, x.ptr, lw.ptr, mean.ptr, rstd.ptr, dx.ptr, ldw.ptr,
                                      ldb.ptr, scratch.ptr, N, D, s);
    });
    timer.report_op("gelu_fwd N,3072", 0, [&] {
      activation_forward(fsdp::ActivationKind::GeluTanh, x.ptr, y.ptr, N * F, s);
    });
    timer.report_op("gelu_bwd N,3072", 0, [&] {
      activation_backward(fsdp::ActivationKind::GeluTanh, x.ptr, dy.ptr, dx.ptr, N * F, s);
    });
    const BroadcastGeometry g = broadcast_geometry({N, D}, {N, D}, "add");
    timer.report_op("residual_add N,768", 0,
                    [&] { binary(BinaryOp::Add, x.ptr, dy.ptr, y.ptr, g, s); });
    timer.report_op("bias_grad N,3072", 0, [&] { sum_over_rows(dy.ptr, dw.ptr, N, F, s); });
  }
  {  // the Llamas' own ops at TinyLlama's widths (D 2048, 32 heads of 64, MLP 5632): RMS norm,
     // rotary on the (B, T, heads, 64) projection read as (B, heads, T, 64), SiLU
    const std::int64_t LD = 2048, LH = 32, LF = 5632;
    Buffer<bf16> x(N * LF), dy(N * LF), y(N * LF), dx(N * LF), w(LD), cos(T * hd), sin(T * hd);
    Buffer<float> rstd(N), dw(LD);
    timer.report_op("rms_norm_fwd N,2048", 0,
                    [&] { rms_norm_forward(x.ptr, w.ptr, y.ptr, rstd.ptr, N, LD, 1e-5f, s); });
    timer.report_op("rms_norm_bwd N,2048", 0, [&] {
      rms_norm_backward(dy.ptr, x.ptr, w.ptr, rstd.ptr, dx.ptr, dw.ptr, N, LD, s);
    });
    const RotaryGeometry rg{.B = B,
                            .H = LH,
                            .S = T,
                            .D = hd,
                            .x_batch = T * LD,
                            .x_head = hd,
                            .x_row = LD,
                            .table_batch = 0};
    timer.report_op("rotary N,32x64", 0,
                    [&] { rotary(x.ptr, cos.ptr, sin.ptr, y.ptr, rg, false, s); });
    timer.report_op("silu_fwd N,5632", 0, [&] {
      activation_forward(fsdp::ActivationKind::Silu, x.ptr, y.ptr, N * LF, s);
    });
    timer.report_op("silu_bwd N,5632", 0, [&] {
      activation_backward(fsdp::ActivationKind::Silu, x.ptr, dy.ptr, dx.ptr, N * LF, s);
    });
  }
  {  // classifier, embeddings
    Buffer<bf16> logits(N * V), dlogits(N * V), wte(V * D, 0.02f), emb(N * D);
    Buffer<float> losses(N), dwte(V * D);
    std::vector<std::int32_t> host_tokens(N);
    std::mt19937 g(7);
    for (auto& t : host_tokens) t = static_cast<std::int32_t>(g() % V);
    std::int32_t* tokens_d = nullptr;
    FSDP_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&tokens_d), N * sizeof(std::int32_t)));
    FSDP_CUDA_CHECK(
        cudaMemcpy(tokens_d, host_tokens.data(), N * sizeof(std::int32_t), cudaMemcpyHostToDevice));
    timer.report_op("cross_entropy_fused N,50304", 0, [&] {
      cross_entropy_forward_backward(logits.ptr, tokens_d, losses.ptr, dlogits.ptr, N, V, -100,
                                     1.0f / N, s);
    });
    {  // the loss train_gpt runs (the kernel table's): bf16 logits, forward then backward
      Buffer<double> ce_losses(N), ce_lse(N), ce_grad(1);
      std::vector<std::int64_t> host_targets(host_tokens.begin(), host_tokens.end());
      std::int64_t* targets_d = nullptr;
      FSDP_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&targets_d), N * sizeof(std::int64_t)));
      FSDP_CUDA_CHECK(cudaMemcpy(targets_d, host_targets.data(), N * sizeof(std::int64_t),
                                 cudaMemcpyHostToDevice));
      const fsdp::IndexBounds bounds =
          fsdp::class_target_bounds(fsdp::IndexOp::CrossEntropy, V, -100);
      timer.report_op("cross_entropy N,50304", 0, [&] {
        // Targets are in range: the fault record is never written.
        cross_entropy_positions(logits.ptr, targets_d, ce_losses.ptr, ce_lse.ptr, N, V, 1, bounds,
                                nullptr, 0.0, s);
        cross_entropy_positions_backward(logits.ptr, ce_lse.ptr, targets_d, ce_grad.ptr, false,
                                         dlogits.ptr, N, V, 1, bounds, nullptr, 0.0, s);
      });
      cudaFree(targets_d);
    }
    timer.report_op("embedding_fwd N,768", 0,
                    [&] { embedding_forward(wte.ptr, V, tokens_d, emb.ptr, N, D, s); });
    timer.report_op("embedding_bwd N,768", 0,
                    [&] { embedding_backward(emb.ptr, tokens_d, dwte.ptr, V, N, D, s); });
    cudaFree(tokens_d);
  }
  {  // optimizer and clip_grad_norm_ over GPT-2's 124.4M parameters, one flat fp32 shard
    const std::int64_t P = 124439808;
    Buffer<float> param(P), grad(P), m(P, 0.0f), v(P, 0.0f), norm(1);
    AdamWArgs a;
    a.weight_decay = 0.1f;
    timer.report_op("adamw 124M fp32", 0,
                    [&] { adamw_step(param.ptr, grad.ptr, m.ptr, v.ptr, P, a, s); });
    timer.report_op("sum_of_squares 124M fp32", 0,
                    [&] { sum_of_squares(grad.ptr, norm.ptr, P, s); });
  }
  report.write();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Cli cli("bench_gpu_kernels",
                 "core/cuda kernels and cuBLASLt products at GPT-2 124M shapes (bf16), timed with "
                 "CUDA events");
  std::int64_t tokens = 16 * 1024;
  OpTimer timer;
  cli.add_iters(timer.iters, "timed calls per op (median)");
  cli.add_warmup(timer.warmup);
  cli.app()
      .add_option("--tokens", tokens, "B*T tokens, a multiple of T=1024")
      ->check(bench::at_least(1024))
      ->capture_default_str();
  if (const int rc = cli.parse(argc, argv); rc >= 0) return rc;
  return bench::run_main(cli.program(), [&] { return run(cli, timer, tokens); });
}
