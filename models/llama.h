// transformers' LlamaForCausalLM (also Mistral, Qwen2 and Qwen3, built the same way: their class
// names, Qwen2's q/k/v biases, Qwen3's q_norm and k_norm, sliding windows): its module tree,
// class names and FQNs exactly (state dicts load without renaming), modeling_llama.py's forward
// (RMSNorm, RoPE, grouped-query attention, SwiGLU) and a KV cache.
//   LlamaForCausalLM(model: LlamaModel(embed_tokens, layers: ModuleList of LlamaDecoderLayer(
//   self_attn: LlamaAttention(q_proj, k_proj, v_proj, o_proj), mlp: LlamaMLP(gate_proj,
//   up_proj, down_proj, act_fn), input_layernorm, post_attention_layernorm), norm, rotary_emb),
//   lm_head)
#pragma once

#include <cstdint>
#include <string>

#include "core/module.h"
#include "models/causal_lm.h"
#include "models/grouped_query_attention.h"
#include "models/llama_config.h"

namespace fsdp::models {

// weight [E] (ones); rms_norm(x, weight, eps).
class LlamaRMSNorm : public nn::Module {
 public:
  // `cls`: transformers' class name ("LlamaRMSNorm", "MistralRMSNorm").
  LlamaRMSNorm(std::int64_t hidden_size, double eps, TensorOptions options = {},
               const std::string& cls = "LlamaRMSNorm");
  nn::Value forward(const nn::Args& args) override { return forward(args.tensor(0)); }
  Tensor forward(const Tensor& x);
  void reset_parameters() override;
  std::string extra_repr() const override;

  const double eps;
};

// down_proj(act_fn(gate_proj(x)) * up_proj(x)).
class LlamaMLP : public nn::Module {
 public:
  LlamaMLP(const LlamaConfig& config, TensorOptions options = {});
  // `cls`: transformers' class name ("Gemma3MLP"); `activation`: the config's name of act_fn.
  LlamaMLP(const std::string& cls, std::int64_t hidden_size, std::int64_t intermediate_size,
           bool bias, const std::string& activation, TensorOptions options = {});
  nn::Value forward(const nn::Args& args) override;
};

// The decoder layer Llama's and Gemma's families share: self_attn (GroupedQueryAttention) over
// input_layernorm(h), then the family's residual adds around it and the MLP. Calls: (h, cos, sin,
// layer_past=(k, v) | None, use_cache=false) -> h, or (h, (k, v)).
class DecoderLayer : public nn::Module {
 public:
  nn::Value forward(const nn::Args& args) override;

 protected:
  // transformers' `family` + "DecoderLayer", a GradientCheckpointingLayer; its self_attn.
  DecoderLayer(const std::string& family, GroupedQueryAttentionOptions attention,
               std::int64_t layer_idx, TensorOptions options);
  // The layer's output from its input h and self_attn's output.
  virtual Tensor residuals(const Tensor& h, const Tensor& attention) = 0;
};

// self_attn: <family>Attention (Qwen3's q_norm and k_norm), two norms: h + attn, then + mlp.
class LlamaDecoderLayer : public DecoderLayer {
 public:
  LlamaDecoderLayer(const LlamaConfig& config, std::int64_t layer_idx, TensorOptions options = {});

 protected:
  Tensor residuals(const Tensor& h, const Tensor& attention) override;
};

// Calls: (ids [B, S], past_key_values=((k, v), ...) | None, use_cache=false) -> hidden states
// after norm, or (hidden, ((k, v), ...)) with use_cache.
class LlamaModel : public nn::Module {
 public:
  LlamaModel(const LlamaConfig& config, TensorOptions options = {});
  nn::Value forward(const nn::Args& args) override;

  const LlamaConfig config;
};

// lm_head (Linear(E, V, bias=false)) holds model.embed_tokens' weight when tie_word_embeddings.
class LlamaForCausalLM : public RotaryCausalLM<LlamaConfig> {
 public:
  static const nn::ModuleClass& static_class();
  // options.device may be meta: shapes only, materialised later (to_empty + init_weights).
  explicit LlamaForCausalLM(const LlamaConfig& config, TensorOptions options = {});

  void init_weights(nn::Module& module, Generator* generator = nullptr) const override;
};

}  // namespace fsdp::models
