// The device a test suite runs on, from FSDP_TEST_DEVICE: "fake_cuda" runs a suite's ranks on
// the fake_cuda test device (each rank its own, fake_cuda:rank); "cuda" on the GPU, every rank
// on cuda:0 (the GPU machine has one: ranks as threads share it, each on its own streams); "cpu"
// or unset on the CPU. The suites that honour it run twice in the build (tests/fsdp,
// tests/examples meson.build) and on cuda in tests/gpu/run_device_checks.sh.
#pragma once

#include "core/device.h"

namespace fsdp::testing {

// CPU, FakeCUDA or CUDA; a ValueError naming the variable for any other value.
DeviceType test_device_type();
bool test_device_is_fake_cuda();
// The device of rank `rank`: fake_cuda:rank, cuda:0 or the CPU.
Device test_device(int rank);

}  // namespace fsdp::testing
