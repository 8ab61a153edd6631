// What a training job asks of its accelerator besides tensors: timing events around a stretch of
// queued work, and the device's name (the MFU's peak, mfu.h). CUDA's come from core/cuda
// (device_timing_cuda.cpp, built with CUDA); a build without it has none
// (device_timing_none.cpp), and so do cpu and fake_cuda.
#pragma once

#include <memory>
#include <string>

#include "core/device.h"

namespace fsdp::examples {

// Two timing events on the device's current stream.
class DeviceInterval {
 public:
  virtual ~DeviceInterval() = default;
  virtual void start() = 0;  // records the start after the work queued so far
  // Records the end, waits for it, and returns the device's time between the two (seconds).
  virtual double stop_seconds() = 0;
};

// The timing events of `device`; null where it has none.
std::unique_ptr<DeviceInterval> device_interval(Device device);

// The device's name as its driver gives it ("NVIDIA H100 80GB HBM3"); "" where there is none.
std::string device_name(Device device);

}  // namespace fsdp::examples
