// torch.nn.MultiheadAttention: scaled dot-product attention over num_heads heads, with packed
// (in_proj_weight) or separate (q/k/v_proj_weight, when kdim/vdim differ) input projections.
#pragma once

#include <optional>
#include <utility>

#include "core/module.h"
#include "core/nn/cloneable.h"

namespace fsdp::nn {

// torch's keyword arguments after (embed_dim, num_heads).
struct MultiheadAttentionOptions {
  double dropout = 0.0;
  bool bias = true;
  bool add_bias_kv = false;
  bool add_zero_attn = false;
  std::optional<std::int64_t> kdim;  // default embed_dim
  std::optional<std::int64_t> vdim;  // default embed_dim
  bool batch_first = false;
  TensorOptions tensor = {};
};

// The optional inputs of MultiheadAttention::forward, with torch's defaults.
struct AttentionArgs {
  Tensor key_padding_mask;  // (N, S) or (S): bool (true = ignore) or float (added)
  bool need_weights = true;
  Tensor attn_mask;  // (L, S) or (N*num_heads, L, S): bool (true = masked) or float (added)
  bool average_attn_weights = true;
  bool is_causal = false;  // a hint that attn_mask is causal; requires attn_mask
};

// Parameters (in registration order): in_proj_weight [3E, E] (xavier_uniform) or
// q_proj_weight [E, E], k_proj_weight [E, kdim], v_proj_weight [E, vdim]; in_proj_bias [3E]
// (zeros); bias_k, bias_v [1, 1, E] (xavier_normal) with add_bias_kv; child out_proj
// (NonDynamicallyQuantizableLinear, bias zeroed).
class MultiheadAttention : public Module, public Cloneable {
 public:
  FSDP_MODULE_CLASS(MultiheadAttention, Module)
  MultiheadAttention(std::int64_t embed_dim, std::int64_t num_heads, double dropout = 0.0,
                     bool bias = true, TensorOptions options = {});
  MultiheadAttention(std::int64_t embed_dim, std::int64_t num_heads,
                     const MultiheadAttentionOptions& o);

  // Module call convention: (query, key, value, key_padding_mask=None, need_weights=True,
  // attn_mask=None, average_attn_weights=True, is_causal=False) -> (output, weights or None).
  Value forward(const Args& args) override;
  // Typed form: (output, weights); weights undefined unless need_weights.
  std::pair<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const AttentionArgs& a = {});
  ModulePtr clone_structure() const override;

  const std::int64_t embed_dim;
  const std::int64_t kdim;
  const std::int64_t vdim;
  const std::int64_t num_heads;
  const std::int64_t head_dim;
  const double dropout;
  const bool batch_first;
  const bool add_zero_attn;
  const bool qkv_same_embed_dim;

  // torch's _reset_parameters: in_proj (xavier_uniform), zero in_proj and out_proj biases,
  // bias_k/bias_v (xavier_normal). out_proj's weight is out_proj's own:
  // reset_parameters_recursively (core/nn/init.h) resets it first, as the constructor builds it
  // first.
  void reset_parameters() override;

 private:
  // The tail of every path: merged heads (L * N, E) through out_proj, the weights averaged or
  // not, the caller's layout (unbatched, batch_first) back. With batch_major_rows the merged
  // rows are (N * L, E), batch_first's own order, and need no transposing back.
  std::pair<Tensor, Tensor> finish(const Tensor& merged, const Tensor& attn, bool batched,
                                   std::int64_t tgt_len, std::int64_t bsz, std::int64_t src_len,
                                   const AttentionArgs& a, bool batch_major_rows = false);

  MultiheadAttentionOptions options_;
};

// The value of an optional tensor argument: undefined for None (TypeError for other non-tensors).
Tensor optional_tensor_arg(const Value& v, const char* name);

}  // namespace fsdp::nn
