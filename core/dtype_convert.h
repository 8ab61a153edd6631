// Bulk conversion between floating dtypes for contiguous buffers: the path of every dtype cast
// (Tensor::copy_, to(), mixed precision's casts of flat parameters and gradients). Vectorised
// where the CPU allows (F16C for float16; plain integer arithmetic the compiler vectorises for
// bfloat16), with the same rounding as the scalar converters in core/dtype.h (nearest even).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace fsdp {

// Converts n elements from `src` (dtype sd) into `dst` (dtype dd); both contiguous and not
// overlapping. Returns false, doing nothing, for a pair of dtypes it has no fast path for.
bool convert_contiguous(void* dst, DType dd, const void* src, DType sd, std::int64_t n);

}  // namespace fsdp
