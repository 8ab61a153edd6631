// The fake_cuda device (-Dfake_cuda=enabled, on by default): an accelerator that runs every GPU
// code path on the CPU with real concurrency. Memory is host pages reachable from host code only
// through copies (device_memory.h); each stream is a worker thread (streams.h); its allocator is
// the caching device allocator (core/caching_device_allocator.h) on that memory; copies go
// through core/device_copy.h. Registered on first use of the device type (core/builtin_devices.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "core/device.h"

namespace fsdp::fake_cuda {

// Registers the allocator, the stream backend and the copy functions of DeviceType::FakeCUDA.
void register_device();

// The host address of a fake_cuda device pointer, for kernels and copies run on a stream;
// ValueError naming the pointer and `what` (the op) when it is not fake_cuda memory.
void* host_view(const void* device_ptr, const char* what = "host_view");
bool is_device_pointer(const void* ptr);

// torch.cuda.memory_stats(device)'s names ("allocated_bytes.all.current", ...) for one device.
std::map<std::string, std::int64_t> memory_stats(Device device);

}  // namespace fsdp::fake_cuda
