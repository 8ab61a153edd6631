// fake_cuda's process-wide state, as a CUDA context: its streams and each device's memory,
// created on first use and never destroyed, so that storages freed by static destructors and
// detached workers still running at exit find the device whole.
#pragma once

#include "core/fake_cuda/device_memory.h"
#include "core/fake_cuda/streams.h"

namespace fsdp::fake_cuda {

FakeStreams& streams();
DeviceMemory& memory(int index);  // reserved at its first use

}  // namespace fsdp::fake_cuda
