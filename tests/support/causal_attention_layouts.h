// MultiheadAttention's causal self-attention (GPT's blocks: the is_causal hint, no weights) run
// with batch_first on (N, L, E) input and without it on the same data transposed, on any device:
// what each returns and how many storages its forward and backward allocate. tests/core/nn (CPU)
// and tests/gpu (CUDA, the emulated device) compare the two.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/memory_stats.h"
#include "core/nn/multihead_attention.h"
#include "core/nn/transformer.h"
#include "core/ops.h"

namespace fsdp::testing {

// One forward and backward of a causal self-attention layer, in (N, L, E) order.
struct CausalAttentionRun {
  Tensor out;                    // the output, transposed back when not batch_first
  bool out_dense = false;        // whether the output came contiguous in the caller's layout
  Tensor grad_x;                 // the input's gradient, (N, L, E)
  std::vector<Tensor> grads;     // the parameters' gradients, named_parameters' order
  std::int64_t allocations = 0;  // storages allocated by the forward and the backward
};

// A fresh causal self-attention layer (E, H) with batch_first or not, initialised on the CPU and
// moved to `options`' dtype and device; its parameters those of `like` when given.
inline std::shared_ptr<nn::MultiheadAttention> causal_attention_layer(
    std::int64_t E, std::int64_t H, bool batch_first, TensorOptions options,
    const std::shared_ptr<nn::MultiheadAttention>& like = nullptr) {
  auto m = std::make_shared<nn::MultiheadAttention>(
      E, H, nn::MultiheadAttentionOptions{.batch_first = batch_first});
  m->to(options.dtype).to(options.device);
  if (like) m->load_state_dict(like->state_dict());
  return m;
}

// `mha` on x (N, L, E) (transposed to (L, N, E) when not batch_first), then the backward of the
// output's gradient `grad` (N, L, E, transposed likewise). x and grad are made ready, and the
// mask built, before the count starts.
inline CausalAttentionRun run_causal_attention(nn::MultiheadAttention& mha, const Tensor& x_nle,
                                               const Tensor& grad_nle) {
  auto caller_layout = [&](const Tensor& t) {
    return (mha.batch_first ? t : t.transpose(0, 1)).contiguous().detach();
  };
  const Tensor x = caller_layout(x_nle).requires_grad_(true), grad = caller_layout(grad_nle);
  const Tensor causal = nn::Transformer::generate_square_subsequent_mask(
      x_nle.size(1), TensorOptions(x_nle.dtype(), x_nle.device()));
  CausalAttentionRun r;
  auto stats = std::make_shared<MemoryStats>();
  {
    MemoryStatsScope scope(stats);
    Tensor y = mha.forward(x, x, x,
                           nn::AttentionArgs{
                               .need_weights = false, .attn_mask = causal, .is_causal = true})
                   .first;
    r.out_dense = y.is_contiguous();
    y.backward(grad);
    r.out = mha.batch_first ? y.detach() : y.detach().transpose(0, 1);
  }
  r.allocations = stats->num_allocs.load();
  r.grad_x = mha.batch_first ? x.grad() : x.grad().transpose(0, 1);
  for (const auto& [name, p] : mha.named_parameters()) r.grads.push_back(p.grad());
  return r;
}

// The largest |a - b| over the elements (read on the host), relative to the largest |b|.
inline double relative_difference(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = a.to(kCPU).to_vector(), vb = b.to(kCPU).to_vector();
  if (va.size() != vb.size()) return INFINITY;
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    if (!std::isfinite(va[i])) return INFINITY;
    diff = std::max(diff, std::abs(va[i] - vb[i]));
    scale = std::max(scale, std::abs(vb[i]));
  }
  return scale == 0 ? diff : diff / scale;
}

}  // namespace fsdp::testing
