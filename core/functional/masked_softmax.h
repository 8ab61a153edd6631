// softmax(scores + mask, -1) in one op: attention adds its mask to the scores and normalises;
// done apart, that is one more (B, L, S) tensor and pass. The sum is formed row by row and the
// softmax runs in place, so results are bit-identical to softmax(add(mask, scores), -1).
#pragma once

#include "core/tensor.h"

namespace fsdp {

// scores (B, L, S) float32/float64; mask additive of the same dtype, (L, S), (1, L, S) or
// (B, L, S), not differentiated (-inf allowed). Differentiable in scores.
Tensor masked_softmax(const Tensor& scores, const Tensor& mask);

}  // namespace fsdp
