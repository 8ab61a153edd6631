// The functions Hugging Face's GPT-2 and Llama add to torch.nn.functional's: RMSNorm, SiLU,
// rotary position embeddings and scaled dot-product attention with grouped-query heads.
// Each is replaced by core's fused op of the same signature when that lands; until then they
// are written here once, over core's differentiable ops.
#pragma once

#include <cstdint>
#include <optional>

#include "core/tensor.h"

namespace fsdp::models {

// LlamaRMSNorm: weight * (x * rsqrt(mean(x^2, -1) + eps)), the normalisation in float32 and
// cast back to x's dtype before the weight multiply. Replaced by core's fused op.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps);

// x * sigmoid(x). Replaced by core's fused op.
Tensor silu(const Tensor& a);

// x (B, H, S, D) rotated by cos/sin (S, D) = cat(freqs, freqs): x*cos + rotate_half(x)*sin with
// rotate_half(x) = cat(-x[D/2:], x[:D/2]), pairs (j, j + D/2). Replaced by core's fused op.
Tensor apply_rotary(const Tensor& x, const Tensor& cos, const Tensor& sin);

// torch.nn.functional.scaled_dot_product_attention (no dropout): q (B, H, L, D), k and v
// (B, Hkv, S, D); attn_mask bool (true = attend) or additive float, broadcast to (B, H, L, S);
// is_causal masks key j > query i (top-left aligned, as torch); scale defaults to D^-0.5;
// enable_gqa lets Hkv divide H (query head n uses kv head n / (H / Hkv)). Replaced by core's
// fused op.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = {}, bool is_causal = false,
                                    std::optional<double> scale = {}, bool enable_gqa = false);

// RoPE's inverse frequencies in float32 exactly as transformers computes them:
// 1.0f / powf(theta, float(2i) / float(dim)), i < dim / 2. Replaced by core's op.
Tensor rotary_inv_freq(std::int64_t dim, double theta);

// cos and sin (S, D) at positions p0 .. p0+S-1: freqs = float(p) * inv_freq in float32,
// emb = cat(freqs, freqs), in `dtype`. Replaced by core's op.
std::pair<Tensor, Tensor> rotary_cos_sin(const Tensor& inv_freq, std::int64_t p0, std::int64_t S,
                                         DType dtype);

}  // namespace fsdp::models
