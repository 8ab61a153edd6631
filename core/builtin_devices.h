// The devices a build has beyond the CPU, registered on first use: the first lookup of a device
// type's allocator, stream backend or copy functions that finds none registers them (fake_cuda
// with -Dfake_cuda=enabled, CUDA when the build found it), so no static initialiser has to
// survive static linking.
#pragma once

#include <string>

#include "core/device.h"

namespace fsdp {

void ensure_builtin_devices();  // once per process; later calls return at once
// Why `device` has no backend in this build: "this build has no fake_cuda device (configure with
// -Dfake_cuda=enabled)".
std::string missing_device_reason(Device device);

// Registers each device the build has (FSDP_HAVE_FAKE_CUDA, FSDP_HAVE_CUDA).
void register_builtin_devices();

}  // namespace fsdp
