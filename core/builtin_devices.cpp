#include "core/builtin_devices.h"

#include <mutex>

#if FSDP_HAVE_FAKE_CUDA
#include "core/fake_cuda/fake_cuda.h"
#endif
#if FSDP_HAVE_CUDA
#include "core/cuda/cuda_device.h"
#endif

namespace fsdp {

void register_builtin_devices() {
#if FSDP_HAVE_FAKE_CUDA
  fake_cuda::register_device();
#endif
#if FSDP_HAVE_CUDA
  cuda::register_device();
#endif
}

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
