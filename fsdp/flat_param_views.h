// Unflattening as one autograd node: views of a flat parameter's buffer, one per original
// parameter, whose backward writes every incoming gradient into one zero-initialised flat
// gradient of the flat parameter's size (padding stays zero). One node and one allocation per
// unit, where a narrow per parameter would allocate a full-size zero tensor each.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace fsdp {

// Views of `flat` (1-D, contiguous) at `offsets` with `shapes`. Differentiable with respect to
// `flat` when grad mode is on and flat requires grad.
std::vector<Tensor> flat_param_views(const Tensor& flat, const std::vector<Shape>& shapes,
                                     const std::vector<std::int64_t>& offsets);

}  // namespace fsdp
