// transformers' Gemma3ForCausalLM (Gemma 3's text model, model_type "gemma3_text") and
// Gemma2ForCausalLM ("gemma2"): their module trees, class names and FQNs exactly (state dicts
// load without renaming), modeling_gemma3.py's and modeling_gemma2.py's forward and a KV cache.
// What differs from Llama: RMSNorms in float32 scaling by 1 + weight, the embeddings scaled by
// sqrt(hidden_size), four norms per layer (the attention's and the MLP's outputs normalised before
// their residual adds), the attention scale query_pre_attn_scalar ** -0.5, sliding and full
// layers, GELU (tanh) gating, and the final logits' tanh softcap; Gemma 3's q_norm and k_norm and
// rope per layer type; Gemma 2's softcap of the attention scores. The C++ classes are Gemma*;
// their module classes are transformers' (family() + "Attention", ...):
//   Gemma3ForCausalLM(model: Gemma3TextModel (Gemma2Model)(embed_tokens:
//   Gemma3TextScaledWordEmbedding, layers: ModuleList of Gemma3DecoderLayer(self_attn:
//   Gemma3Attention(q_proj, k_proj, v_proj, o_proj, q_norm, k_norm (Gemma 3)), mlp:
//   Gemma3MLP(gate_proj, up_proj, down_proj, act_fn), input_layernorm, post_attention_layernorm,
//   pre_feedforward_layernorm, post_feedforward_layernorm), norm, rotary_emb:
//   Gemma3RotaryEmbedding), lm_head)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/module.h"
#include "core/nn/embedding.h"
#include "models/causal_lm.h"
#include "models/gemma_config.h"
#include "models/llama.h"

namespace fsdp::models {

// weight [E] (zeros); x in float32 normalised (x * rsqrt(mean(x^2) + eps)), times
// (1 + weight) in float32, then cast to x's dtype.
class GemmaRMSNorm : public nn::Module {
 public:
  // `cls`: transformers' class name ("Gemma3RMSNorm").
  GemmaRMSNorm(std::int64_t dim, double eps, TensorOptions options, const std::string& cls);
  nn::Value forward(const nn::Args& args) override { return forward(args.tensor(0)); }
  Tensor forward(const Tensor& x);
  void reset_parameters() override;
  std::string extra_repr() const override;

  const double eps;
};

// Gemma3TextScaledWordEmbedding / Gemma2TextScaledWordEmbedding: an Embedding whose rows are
// multiplied by sqrt(hidden_size) rounded to float32, then to the weight's dtype (transformers'
// embed_scale buffer, non-persistent, cast to the weight's dtype in forward; held here as that
// number).
class GemmaScaledWordEmbedding : public nn::Embedding {
 public:
  // `cls`: transformers' class name.
  GemmaScaledWordEmbedding(const std::string& cls, std::int64_t num_embeddings,
                           std::int64_t embedding_dim, std::optional<std::int64_t> padding_idx,
                           double embed_scale, TensorOptions options = {});
  nn::Value forward(const nn::Args& args) override { return forward(args.tensor(0)); }
  Tensor forward(const Tensor& indices);
  nn::ModulePtr clone_structure() const override;

  const double embed_scale;  // sqrt(hidden_size), as the config gives it
};

// Gemma 3: non-persistent buffers <type>_inv_freq and <type>_original_inv_freq for each layer
// type the config uses (sorted), each from that type's rope parameters; Gemma 2: inv_freq and
// original_inv_freq, Llama's. Calls: (x, past_length, layer_type) -> (cos, sin), each
// (S, head_dim) in x's dtype (Gemma 2: the same for every layer type).
class GemmaRotaryEmbedding : public nn::Module {
 public:
  GemmaRotaryEmbedding(const GemmaConfig& config, TensorOptions options = {});
  nn::Value forward(const nn::Args& args) override;
  void reset_parameters() override;  // recomputes the buffers (after to_empty)

  const GemmaConfig config;
  // Gemma 3: its layer types, sorted and distinct (the buffers' prefixes); Gemma 2: {""}.
  const std::vector<std::string> buffer_prefixes;
};

// self_attn: <family>Attention (Gemma 3's q_norm and k_norm, Gemma 2's softcap), four norms: the
// attention's and the MLP's outputs normalised before their residual adds.
class GemmaDecoderLayer : public DecoderLayer {
 public:
  GemmaDecoderLayer(const GemmaConfig& config, std::int64_t layer_idx, TensorOptions options = {});

 protected:
  Tensor residuals(const Tensor& h, const Tensor& attention) override;
};

// Calls: (ids [B, S], past_key_values=((k, v), ...) | None, use_cache=false) -> hidden states
// after norm, or (hidden, ((k, v), ...)) with use_cache.
class GemmaModel : public nn::Module {
 public:
  GemmaModel(const GemmaConfig& config, TensorOptions options = {});
  nn::Value forward(const nn::Args& args) override;

  const GemmaConfig config;
};

// lm_head (Linear(E, V, bias=false)) holds model.embed_tokens' weight when tie_word_embeddings;
// the logits are softcapped (tanh(x / c) * c) with final_logit_softcapping.
class GemmaForCausalLM : public RotaryCausalLM<GemmaConfig> {
 public:
  // options.device may be meta: shapes only, materialised later (to_empty + init_weights).
  explicit GemmaForCausalLM(const GemmaConfig& config, TensorOptions options = {});

  void init_weights(nn::Module& module, Generator* generator = nullptr) const override;

 protected:
  Tensor final_logits(const Tensor& logits) const override;
};

}  // namespace fsdp::models
