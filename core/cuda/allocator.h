// CUDA's allocator: the caching device allocator (core/device_allocator.h) per device over
// cudaMalloc and CUDA events (cuda_memory_backend.h), its pools keyed by cudaStream_t.
#pragma once

#include "core/caching_device_allocator.h"
#include "core/memory.h"

namespace fsdp::cuda {

Allocator& allocator();
CachingDeviceAllocator& caching_allocator(Device device);  // device's index >= 0

}  // namespace fsdp::cuda
