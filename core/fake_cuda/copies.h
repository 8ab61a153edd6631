// fake_cuda's copies (core/device_copy.h): host to device staged when queued, device to host
// waiting for the stream, device to device; each end checked to be device memory when queued.
#pragma once

#include "core/device_copy.h"

namespace fsdp::fake_cuda {

const DeviceCopyFunctions& copy_functions();

}  // namespace fsdp::fake_cuda
