// device_timing.h in a build without CUDA: no device has timing events or a name.
#include "examples/device_timing.h"

namespace fsdp::examples {

std::unique_ptr<DeviceInterval> device_interval(Device) {
  return nullptr;
}

std::string device_name(Device) {
  return "";
}

}  // namespace fsdp::examples
