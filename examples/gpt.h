// The byte-level GPT of examples/train_gpt (issue 10, item 9): token and position embeddings,
// L pre-norm TransformerEncoderLayers (GELU, no dropout) under a causal mask, a final LayerNorm
// and a head whose weight is the token embedding's. Children and FQNs are exactly those of
// tools/torch_reference/train_gpt_ref.py, so checkpoints move between the two unchanged.
#pragma once

#include <cstdint>

#include "core/module.h"
#include "core/tensor.h"

namespace fsdp::examples {

struct GPTConfig {
  std::int64_t layers = 4, d_model = 256, heads = 4, seq = 128, vocab = 256;
};

// Children: tok_emb Embedding(V, D), pos_emb Embedding(T, D), blocks ModuleList of L
// TransformerEncoderLayer(D, H, 4D, dropout 0, gelu, batch_first, norm_first), ln_f LayerNorm(D),
// head Linear(D, V, bias=false) holding tok_emb.weight (one tensor in both slots).
class GPT : public nn::Module {
 public:
  FSDP_MODULE_CLASS(GPT, nn::Module)
  // options.device may be kMeta: shapes only, no storage.
  explicit GPT(const GPTConfig& cfg, TensorOptions options = {});

  // (idx [B, T] int64, T <= seq) -> logits [B, T, V]. Children run through their slots, so a
  // block replaced by a wrapper runs through the wrapper.
  nn::Value forward(const nn::Args& args) override;
  Tensor forward(const Tensor& idx);

  const GPTConfig config;
};

// GPT-2 initialisation of `module`'s own parameters (any subtree of a GPT): weights of Linear,
// Embedding and attention projections ~ N(0, 0.02), biases 0, LayerNorm weight 1 and bias 0.
// Draws from this thread's default generator in named_parameters() order (a tied weight once),
// so it also serves as FSDP's param_init_fn, one unit at a time.
void gpt_init(nn::Module& module);

// Mean cross-entropy over all B*T positions of model(inputs) [B, T, V] against targets [B, T].
Tensor gpt_loss(nn::Module& model, const Tensor& inputs, const Tensor& targets);

}  // namespace fsdp::examples
