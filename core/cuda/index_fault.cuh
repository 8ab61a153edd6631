// The device side of the index checks (kernels.h's IndexFault): a kernel that meets a bad index
// records the first one of its device and skips the element; the runtime raises it with the
// CPU's message at the next synchronisation (index_fault.h).
#pragma once

#include <cstdint>

#include "core/cuda/kernels.h"

namespace fsdp::cuda {

// Keeps `v` in `f` unless a fault is recorded already: the claim is atomic, `ready` is set after
// the fields, so a host that sees it sees them.
__device__ inline void record_index_fault(IndexFault* f, const IndexBounds& b, std::int64_t v) {
  if (atomicCAS(&f->claimed, 0ull, 1ull) != 0ull) return;
  f->bounds = b;
  f->value = v;
  __threadfence_system();
  atomicExch(&f->ready, 1);
}

// The row that index[i] reads, or -1 (recorded) when it is out of bounds.
template <typename I>
__device__ inline std::int64_t checked_row(const I* index, std::int64_t i, const IndexBounds& b,
                                           IndexFault* f) {
  const std::int64_t v = index[i];
  if (b.valid(v)) return b.row(v);
  record_index_fault(f, b, v);
  return -1;
}

}  // namespace fsdp::cuda
