// The CUDA device (DeviceType::CUDA, built when CUDA is found): its stream backend (streams.h),
// allocator (allocator.h) and copies (copies.h), registered at the first lookup of the device
// type (core/builtin_devices.h), as fake_cuda's are; its kernel table (kernel_table.h) is
// installed by kernels(device) at its first lookup.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/device.h"

namespace fsdp::cuda {

void register_device();

// torch.cuda.memory_stats(device)'s names ("allocated_bytes.all.current", ...) for one device.
std::map<std::string, std::int64_t> memory_stats(Device device);

}  // namespace fsdp::cuda
