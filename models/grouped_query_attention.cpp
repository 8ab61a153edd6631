#include "models/grouped_query_attention.h"

#include <utility>
#include <vector>

#include "core/nn/linear.h"
#include "core/ops.h"
#include "models/attention.h"
#include "models/causal_lm.h"

namespace fsdp::models {

GroupedQueryAttention::GroupedQueryAttention(GroupedQueryAttentionOptions o,
                                             std::int64_t layer_idx_, TensorOptions t)
    : Module(hf_class(o.cls)),
      options(std::move(o)),
      layer_idx(layer_idx_),
      qk_norm(static_cast<bool>(options.qk_norm)) {
  const std::int64_t E = options.hidden_size, D = options.head_dim;
  const std::int64_t H = options.heads, KV = options.kv_heads;
  register_module("q_proj", std::make_shared<nn::Linear>(E, H * D, options.qkv_bias, t));
  register_module("k_proj", std::make_shared<nn::Linear>(E, KV * D, options.qkv_bias, t));
  register_module("v_proj", std::make_shared<nn::Linear>(E, KV * D, options.qkv_bias, t));
  register_module("o_proj", std::make_shared<nn::Linear>(H * D, E, options.o_proj_bias, t));
  if (qk_norm) {
    for (const char* name : {"q_norm", "k_norm"}) register_module(name, options.qk_norm(D));
  }
}

nn::Value GroupedQueryAttention::forward(const nn::Args& args) {
  const Tensor& x = args.tensor(0);
  const Tensor& cos = args.get(1, "cos").tensor();
  const Tensor& sin = args.get(2, "sin").tensor();
  // Qwen3 and Gemma 3 normalise each head of q and k (over its head_dim) before RoPE.
  const auto heads_of = [&](const char* proj, const char* norm, std::int64_t n) {
    const Tensor h = split_heads(call_child(proj, x), n);
    return apply_rotary(qk_norm ? call_child(norm, h) : h, cos, sin);
  };
  const Tensor q = heads_of("q_proj", "q_norm", options.heads);
  const auto [k, v] = with_history(args.get(3, "layer_past"),
                                   heads_of("k_proj", "k_norm", options.kv_heads),  // after RoPE
                                   split_heads(call_child("v_proj", x), options.kv_heads));
  const double p = is_training() ? options.dropout : 0.0;
  const Tensor out =
      call_child("o_proj", merge_heads(causal_attention(q, k, v, options.scale, p,
                                                        options.sliding_window, options.softcap)));
  return nn::Value(std::vector<nn::Value>{out, nn::Value(std::vector<nn::Value>{k, v})});
}

}  // namespace fsdp::models
