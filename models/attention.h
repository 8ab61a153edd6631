// Causal self-attention over a key/value history, shared by GPT-2 and Llama.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include "core/tensor.h"
#include "core/value.h"

namespace fsdp::models {

// q (B, H, S, D) at absolute positions past..past+S-1 over k, v (B, Hkv, past+S, D): query i
// attends keys j <= past + i (and j > past + i - sliding_window with one: Mistral's); Hkv divides
// H (grouped-query). scale multiplies q k^T. With dropout_p > 0 (training) the probabilities are
// dropped out, as the Python models do. With a softcap c (Gemma 2's attn_logit_softcapping) the
// scaled scores become tanh(s / c) * c before the mask, as transformers' eager attention; both
// write the scores out (the fused kernels neither drop out nor softcap).
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                        double dropout_p = 0.0,
                        std::optional<std::int64_t> sliding_window = std::nullopt,
                        std::optional<double> softcap = std::nullopt);

// k and v (B, heads, S, D) after the layer's history: cat along the time axis with
// layer_past's (k, v), or as they are when layer_past is None.
std::pair<Tensor, Tensor> with_history(const nn::Value& layer_past, Tensor k, Tensor v);

// (B, heads, S, D) -> (B, S, heads * D), heads concatenated in order.
Tensor merge_heads(const Tensor& x);

// (B, S, heads * D) -> (B, heads, S, D).
Tensor split_heads(const Tensor& x, std::int64_t heads);

}  // namespace fsdp::models
