#include "tests/support/test_device.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace fsdp::testing {

bool test_device_is_fake_cuda() {
  static const bool fake = [] {
    const char* v = std::getenv("FSDP_TEST_DEVICE");
    const std::string name = v ? v : "cpu";
    FSDP_CHECK(name == "cpu" || name == "fake_cuda", ValueError,
               "FSDP_TEST_DEVICE='{}': expected cpu or fake_cuda", name);
    return name == "fake_cuda";
  }();
  return fake;
}

Device test_device(int rank) {
  return test_device_is_fake_cuda() ? Device(DeviceType::FakeCUDA, rank) : Device(DeviceType::CPU);
}

}  // namespace fsdp::testing
