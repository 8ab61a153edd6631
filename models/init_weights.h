// transformers' _init_weights for GPT-2 and Llama (PreTrainedModel._init_weights and the
// models' overrides), over any subtree of a model.
#pragma once

#include "core/module.h"
#include "core/random.h"

namespace fsdp::models {

// Linear and Conv1D weights ~ N(0, std) (residual Conv1Ds, GPT-2's c_proj: N(0, residual_std)),
// biases 0; Embedding ~ N(0, std) with its padding_idx row
// 0; LayerNorm weight 1, bias 0; RMSNorm weight `rms_norm_weight` (Llama's 1; Gemma's 0, its norms
// scaling by 1 + weight); other buffers (rotary inverse frequencies) recomputed by their module's
// reset_parameters(). Draws from `generator` (else this thread's default one) in
// named_parameters() order, a tied parameter once.
void hf_init_weights(nn::Module& module, double std, double residual_std,
                     Generator* generator = nullptr, double rms_norm_weight = 1.0);

}  // namespace fsdp::models
