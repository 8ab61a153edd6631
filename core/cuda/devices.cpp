#include "core/cuda/devices.h"

#include <cuda_runtime_api.h>

#include <string>

#include "core/cuda/cuda_check.h"
#include "core/cuda/runtime.h"
#include "core/error.h"

namespace fsdp::cuda {

namespace {

struct Count {
  int n = 0;
  std::string why;  // when n is 0
};

// Asked once: the devices visible to a process do not change while it runs.
const Count& visible_devices() {
  static const Count count = [] {
    Count c;
    c.n = device_count(&c.why);
    return c;
  }();
  return count;
}

}  // namespace

int checked_index(Device device) {
  FSDP_CHECK(device.is_cuda(), ValueError, "{}: not a CUDA device", device.str());
  const Device d = device.index < 0 ? Device(DeviceType::CUDA, 0) : device;
  const Count& c = visible_devices();
  FSDP_CHECK(c.n > 0, RuntimeError, "{}: no CUDA device on this machine ({})", d.str(), c.why);
  FSDP_CHECK(d.index < c.n, ValueError, "{}: no such device (this machine has {})", d.str(),
             c.n == 1 ? std::string("1 CUDA device, cuda:0")
                      : fmt::format("{} CUDA devices, cuda:0 to cuda:{}", c.n, c.n - 1));
  return d.index;
}

DeviceGuard::DeviceGuard(int index) {
  FSDP_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != index)
    FSDP_CUDA_CHECK(cudaSetDevice(index));
  else
    previous_ = -1;  // nothing to restore
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);  // no throw from a destructor
}

}  // namespace fsdp::cuda
