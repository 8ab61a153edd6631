// The layout change between a packed in-projection and attention heads, in one pass each way.
// MultiheadAttention's self-attention projects q, k and v with one product into (L, N, 3E);
// narrowing that three ways and copying each part into heads costs three copies forward and,
// backward, three zero-filled (L, N, 3E) gradients plus two full-size additions. These ops
// move each element once.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace fsdp {

// Splits packed (L, N, parts * heads * head_dim) into `parts` contiguous (N * heads, L, head_dim)
// tensors; part 0 is divided by `first_divisor` (the attention scale of q). Differentiable (one
// node for all parts); every floating dtype on CPU (16-bit ones divide in float, rounding once).
std::vector<Tensor> split_heads(const Tensor& packed, std::int64_t parts, std::int64_t heads,
                                double first_divisor = 1.0);

}  // namespace fsdp
