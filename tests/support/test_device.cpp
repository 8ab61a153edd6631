#include "tests/support/test_device.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace fsdp::testing {

DeviceType test_device_type() {
  static const DeviceType type = [] {
    const char* v = std::getenv("FSDP_TEST_DEVICE");
    const std::string name = v ? v : "cpu";
    FSDP_CHECK(name == "cpu" || name == "fake_cuda" || name == "cuda", ValueError,
               "FSDP_TEST_DEVICE='{}': expected cpu, fake_cuda or cuda", name);
    return name == "fake_cuda" ? DeviceType::FakeCUDA
           : name == "cuda"    ? DeviceType::CUDA
                               : DeviceType::CPU;
  }();
  return type;
}

bool test_device_is_fake_cuda() {
  return test_device_type() == DeviceType::FakeCUDA;
}

Device test_device(int rank) {
  switch (test_device_type()) {
    case DeviceType::FakeCUDA:
      return Device(DeviceType::FakeCUDA, rank);
    case DeviceType::CUDA:
      return Device(DeviceType::CUDA, 0);
    default:
      return kCPU;
  }
}

}  // namespace fsdp::testing
