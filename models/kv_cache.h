// The key/value cache of generation (transformers' DynamicCache): per layer, K (after RoPE for
// Llama) and V of every position so far, [B, kv_heads, t, D], grown along t by each forward.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace fsdp::models {

struct KVCache {
  std::vector<Tensor> keys, values;  // per layer; empty before the first forward

  // Positions cached so far: the position offset of the next forward's first token.
  std::int64_t length() const { return keys.empty() ? 0 : keys.front().size(2); }
  void clear() {
    keys.clear();
    values.clear();
  }
};

}  // namespace fsdp::models
