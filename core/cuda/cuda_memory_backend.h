// The caching device allocator's backend on the real device: cudaMalloc/cudaFree and events.
#pragma once

#include <memory>

#include "core/caching_device_allocator.h"

namespace fsdp::cuda {

// Device memory of the current device (cudaSetDevice before use).
std::unique_ptr<DeviceMemoryBackend> make_cuda_memory_backend();

}  // namespace fsdp::cuda
