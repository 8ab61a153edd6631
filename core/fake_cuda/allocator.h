// fake_cuda's allocator: a caching device allocator (core/caching_device_allocator.h) per
// device over its DeviceMemory, whose record_stream events come from the device's streams;
// statistics per device (allocator_stats(fake_cuda:N)) and for all devices together.
#pragma once

#include "core/caching_device_allocator.h"
#include "core/memory.h"

namespace fsdp::fake_cuda {

Allocator& allocator();
CachingDeviceAllocator& caching_allocator(Device device);  // device's index >= 0

}  // namespace fsdp::fake_cuda
