// Llama's rotary position embedding: the inverse frequencies of each rope_type in float32 as
// transformers' modeling_rope_utils computes them, and the LlamaRotaryEmbedding module.
#pragma once

#include <cstdint>
#include <utility>

#include "core/module.h"
#include "models/llama_config.h"

namespace fsdp::models {

// inv_freq [head_dim / 2] float32 for `rope`: default, linear (/ factor) or llama3 (bands),
// every step in float32 in transformers' operation order.
Tensor rope_inv_freq(const RopeParameters& rope, std::int64_t head_dim);

// Non-persistent buffers inv_freq and original_inv_freq (not in the state dict, as in torch).
// Calls: (x, past_length) -> (cos, sin), each (S, head_dim) in x's dtype for positions
// past_length .. past_length + S - 1, S = x.size(1).
class LlamaRotaryEmbedding : public nn::Module {
 public:
  // `cls`: transformers' class name ("LlamaRotaryEmbedding", "MistralRotaryEmbedding").
  LlamaRotaryEmbedding(const LlamaConfig& config, TensorOptions options = {},
                       const std::string& cls = "LlamaRotaryEmbedding");
  nn::Value forward(const nn::Args& args) override;
  void reset_parameters() override;  // recomputes the buffers (after to_empty)

  const RopeParameters rope;
  const std::int64_t head_dim;
};

}  // namespace fsdp::models
