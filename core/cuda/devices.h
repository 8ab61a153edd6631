// Which CUDA devices this process may use, and the device a call runs on. Every entry of the
// CUDA device (streams, copies, allocator, kernel table) checks its device here first, so that
// cuda:3 on a one-GPU machine, or any cuda device on a machine without one, is one line naming
// the device and what the machine has, not a CUDA status from some later call.
#pragma once

#include "core/device.h"

namespace fsdp::cuda {

// The index of `device` (cuda, or cuda:N; "cuda" is cuda:0) after checking it exists:
// RuntimeError "cuda:0: no CUDA device on this machine (<the runtime's reason>)", or ValueError
// "cuda:3: no such device (this machine has 1 CUDA device, cuda:0)".
int checked_index(Device device);

// Makes `index` the calling thread's CUDA device while alive (CUDA's current device is per
// thread; streams, events and allocations belong to the device current when they are made).
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace fsdp::cuda
