// The caching device allocator's backend on the real device: cudaMalloc/cudaFree and events.
#pragma once

#include <memory>

#include "core/caching_device_allocator.h"

namespace fsdp::cuda {

// Memory and events of CUDA device `device` (each call made with it current).
std::unique_ptr<DeviceMemoryBackend> make_cuda_memory_backend(int device = 0);

}  // namespace fsdp::cuda
