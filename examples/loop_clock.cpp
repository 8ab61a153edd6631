#include "examples/loop_clock.h"

#include "core/stream.h"

namespace fsdp::examples {

LoopClock::LoopClock(Device device) : device_(device), device_timing_(device_interval(device)) {
  start();
}

void LoopClock::start() {
  if (device_timing_)
    device_timing_->start();
  else
    t0_ = std::chrono::steady_clock::now();
}

double LoopClock::elapsed_seconds() {
  if (device_timing_) return device_timing_->stop_seconds();
  if (device_.is_accelerator()) device_synchronize(device_);  // the queued work is the loop's
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

}  // namespace fsdp::examples
