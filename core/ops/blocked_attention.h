// Attention that never holds the (L, S) score matrix: softmax(q k^T + mask) v computed over
// blocks of keys with an online softmax (a running row maximum and sum rescale what was
// accumulated so far), and a backward that recomputes each block's probabilities from the saved
// row log-sum-exp. Memory is O(L + block^2) per batch entry instead of O(L * S); for short
// sequences one (L, S) product is faster, so MultiheadAttention uses this only for long ones.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace fsdp {

// Keys per block above which MultiheadAttention switches to blocked_attention.
inline constexpr std::int64_t kBlockedAttentionMinKeys = 512;

// q (B, L, D) already scaled, k (B, S, D), v (B, S, Dv); mask undefined or additive (L, S),
// (1, L, S) or (B, L, S), -inf allowed (not differentiated). Returns (B, L, Dv).
// Differentiable in q, k and v; float32 and float64 on CPU.
Tensor blocked_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask);

}  // namespace fsdp
