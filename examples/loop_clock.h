// The clock of a training loop (issue 25): on a device with timing events (CUDA) the time the
// device spent from start() to elapsed_seconds(), measured by events around the work as llm.c
// and torch.cuda.Event do; elsewhere the host's steady clock, after the device's queued work.
#pragma once

#include <chrono>
#include <memory>

#include "core/device.h"
#include "examples/device_timing.h"

namespace fsdp::examples {

class LoopClock {
 public:
  explicit LoopClock(Device device);
  void start();              // (again: restarts)
  double elapsed_seconds();  // since start(), the work queued so far included
  // In messages: "CUDA events" or "host clock".
  const char* source() const { return device_timing_ ? "CUDA events" : "host clock"; }

 private:
  Device device_;
  std::unique_ptr<DeviceInterval> device_timing_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace fsdp::examples
