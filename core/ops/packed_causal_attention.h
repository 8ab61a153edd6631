// Causal self-attention straight from a packed in-projection: MultiheadAttention's q, k and v
// are the three parts of one (L, N, 3E) product, its output one (L, N, E) tensor. Splitting the
// parts into heads and merging the heads back costs a copy each way, forward and backward
// (split_heads, transpose + contiguous). This op hands the attention kernels views instead: q, k
// and v read from the projection in place, the output written merged, and the projection's
// gradient written by the backward into one (L, N, 3E) buffer (dq, dk, dv views of it). A device
// whose kernels need dense operands copies them itself (the CPU's 16-bit path does).
//
// Layouts: a projection whose rows are dense (last stride 1) is read through its own L and N
// strides, so batch_first's (N, L, 3E) product transposed to (L, N, 3E) costs no copy; any other
// is made contiguous first. The output, and the backward's projection gradient, are dense in
// proj's dim order: N-major (an (L, N, *) view of (N, L, *) memory) when proj is, so that
// batch_first's out_proj reads (N, L, E) rows in place. The output's gradient is read as it
// comes when its rows are dense.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace fsdp {

// out (L, N, E) = the heads of softmax(scale * q k^T + causal mask) v merged, q, k, v the parts
// [0, E), [E, 2E), [2E, 3E) of proj (L, N, 3E), each split into `heads` heads of E / heads
// (torch's multi_head_attention_forward with is_causal and scaled_dot_product_attention).
// Differentiable in proj; every floating dtype (16-bit ones computed in float32). out is N-major
// when proj is (header comment).
Tensor packed_causal_attention(const Tensor& proj, std::int64_t heads, double scale);

}  // namespace fsdp
