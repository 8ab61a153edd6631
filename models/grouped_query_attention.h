// transformers' grouped-query self-attention as Llama's family (Llama, Mistral, Qwen2, Qwen3) and
// Gemma's (Gemma 2, Gemma 3) build it: one module, its class name and what differs between the
// families given (q/k/v and o_proj biases, Qwen3's and Gemma 3's q_norm and k_norm and their
// RMSNorm, the score scale, Gemma 2's softcap, the layer's sliding window, dropout).
//   <cls>(q_proj, k_proj, v_proj, o_proj, q_norm, k_norm (with a qk_norm factory))
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/module.h"

namespace fsdp::models {

// What one family's attention layer is made of.
struct GroupedQueryAttentionOptions {
  std::string cls;  // transformers' class name: "LlamaAttention", "Gemma3Attention", ...
  std::int64_t hidden_size = 0, heads = 0, kv_heads = 0, head_dim = 0;
  bool qkv_bias = false, o_proj_bias = false;
  // Multiplies q k^T: Llama's 1 / sqrt(head_dim), Gemma's query_pre_attn_scalar ** -0.5.
  double scale = 1.0;
  double dropout = 0.0;                        // of the probabilities, in training
  std::optional<std::int64_t> sliding_window;  // this layer's
  std::optional<double> softcap;               // Gemma 2's attn_logit_softcapping
  // q_norm and k_norm over each head's head_dim features (Qwen3's LlamaRMSNorm, Gemma 3's
  // GemmaRMSNorm); empty: none.
  std::function<nn::ModulePtr(std::int64_t dim)> qk_norm;
};

// Calls: (x [B, S, E], cos, sin, layer_past=(k, v) | None) -> (out, (k, v)): q and k split into
// heads, normalised (q_norm, k_norm) and then rotated; k after RoPE and v of the KV heads,
// [B, KV, past+S, D].
class GroupedQueryAttention : public nn::Module {
 public:
  GroupedQueryAttention(GroupedQueryAttentionOptions options, std::int64_t layer_idx,
                        TensorOptions tensor_options = {});
  nn::Value forward(const nn::Args& args) override;

  const GroupedQueryAttentionOptions options;
  const std::int64_t layer_idx;
  const bool qk_norm;  // q_norm and k_norm registered
};

// The options Llama's and Gemma's configs give alike: the class name (family() + "Attention"), the
// sizes, dropout, layer `layer_idx`'s window and, with `qk_norm`, q_norm and k_norm as
// Norm(head_dim, rms_norm_eps, options, family() + "RMSNorm"); the caller sets the biases, the
// scale and the softcap.
template <class Norm, class Config>
GroupedQueryAttentionOptions config_attention_options(const Config& c, std::int64_t layer_idx,
                                                      bool qk_norm, TensorOptions options) {
  GroupedQueryAttentionOptions o;
  o.cls = c.family() + "Attention";
  o.hidden_size = c.hidden_size;
  o.heads = c.num_attention_heads;
  o.kv_heads = c.num_key_value_heads;
  o.head_dim = c.head_dim;
  o.dropout = c.attention_dropout;
  o.sliding_window = c.window_of(layer_idx);
  if (qk_norm) {
    o.qk_norm = [eps = c.rms_norm_eps, cls = c.family() + "RMSNorm", options](std::int64_t dim) {
      return std::make_shared<Norm>(dim, eps, options, cls);
    };
  }
  return o;
}

}  // namespace fsdp::models
