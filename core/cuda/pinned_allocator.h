// Page-locked host memory (cudaHostAlloc), registered as CUDA's pinned host allocator
// (core/memory.h: Storage::pinned): copies between it and a GPU are DMA, asynchronous to the host.
// Not cached: FSDP's offloaded shards are allocated once at wrapping and freed with the model
// (cudaFreeHost synchronises the device, so a cache would be needed for churn).
#pragma once

#include "core/memory.h"

namespace fsdp::cuda {

Allocator& pinned_host_allocator();

}  // namespace fsdp::cuda
