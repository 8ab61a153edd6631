#include "core/builtin_devices.h"

#include <mutex>

namespace fsdp {

void ensure_builtin_devices() {
  static std::once_flag once;
  std::call_once(once, register_builtin_devices);
}

std::string missing_device_reason(Device device) {
  switch (device.type) {
    case DeviceType::CUDA:
      return "this build has no CUDA device support (configure with -Dcuda=enabled)";
    case DeviceType::FakeCUDA:
      return "this build has no fake_cuda device (configure with -Dfake_cuda=enabled)";
    case DeviceType::Meta:
      return "meta tensors have no storage or streams";
    case DeviceType::CPU:
      break;
  }
  return "the cpu device is always built in";
}

}  // namespace fsdp
