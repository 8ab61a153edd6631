// fsdp-plan's estimate of the activation memory of one training step: what the forward saves for
// backward, per module type, for a batch of B sequences of T tokens (N = B * T rows), in the
// compute dtype. Each term is what the op saves in core/ (and in PyTorch):
//   Linear            its input (N x in_features)
//   LayerNorm         its input (N x D) and the float32 mean and 1/std (2 N)
//   MultiheadAttention (self-attention) the in-projection's input (N x E), q, k and v (3 N x E),
//                     the softmax probabilities (N x heads x T), with dropout > 0 their byte mask;
//                     out_proj is a Linear
//   TransformerEncoderLayer  GELU's input (N x dim_feedforward; ReLU saves its output, which is
//                     linear2's input already counted), the masks of dropouts with p > 0
//   ReLU, GELU, Tanh, Sigmoid, Dropout (p > 0) outside a layer: one tensor (a byte mask for
//                     Dropout) as wide as the output of the leaf module before it
//   Embedding         nothing (its indices are the batch)
//   the loss          the model's output (the last leaf module's, e.g. the logits) kept by the
//                     loss, and its gradient at the start of backward: 2 N x width
// Widths come from parameter shapes; the number of heads, dropout probabilities and the
// activation from the model file's "attributes" (tools/export_torch_model.py and train_gpt's
// --export-model write them). Modules whose own forward does more (custom classes) are listed as
// not estimated.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/module.h"

namespace fsdp::plan {

struct ActivationEstimate {
  std::int64_t batch = 0, seq = 0;
  std::int64_t bytes = 0;                       // everything below
  std::map<std::string, std::int64_t> by_type;  // module type (or "loss") -> bytes
  std::vector<std::string> assumed;             // "MultiheadAttention: num_heads not given, ..."
  std::vector<std::string> not_estimated;       // types with own forwards this does not know
};

// `elem_bytes`: bytes of an activation element (4 for float32, 2 under bf16/fp16 mixed
// precision). Throws InputError on overflow or non-positive sizes.
ActivationEstimate estimate_activations(const nn::Module& root, std::int64_t batch,
                                        std::int64_t seq, std::int64_t elem_bytes);

}  // namespace fsdp::plan
