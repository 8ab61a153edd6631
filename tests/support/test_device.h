// The device a test suite runs on: FSDP_TEST_DEVICE=fake_cuda runs a suite's ranks on the
// fake_cuda test device (each rank its own, fake_cuda:rank), "cpu" or unset on the CPU. The
// suites that honour it run twice in the build (tests/fsdp, tests/examples meson.build).
#pragma once

#include "core/device.h"

namespace fsdp::testing {

bool test_device_is_fake_cuda();  // ValueError naming the variable for any other value
// The device of rank `rank`: fake_cuda:rank or the CPU.
Device test_device(int rank);

}  // namespace fsdp::testing
