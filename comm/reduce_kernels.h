// The one implementation of ReduceOp semantics (comm/reduce_op.h) on host buffers. Every CPU
// backend reduces through it, always combining ranks in rank order, so results are bit-identical
// across backends.
#pragma once

#include <cstddef>

#include "comm/reduce_op.h"
#include "core/dtype.h"

namespace fsdp::comm {

// out[i] = op(inputs[0][i], ..., inputs[n-1][i]); AVG divides by `ranks` (the group size).
// out may alias any input.
void reduce_buffers(ReduceOp op, DType dtype, void* out, const void* const* inputs, int n,
                    std::size_t count, int ranks);

}  // namespace fsdp::comm
