// The test's stand-in for the emulated CUDA runtime (written apart, by the lead): a registry of
// "device" ranges behind fsdp_emu_device_accessible, faults recorded, and cudaLaunchHostFunc
// queueing host functions until the test runs them, so that a test can change what the call was
// given before the queued product reads it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace fsdp::emu::testing {

// Makes [p, p + bytes) device memory for fsdp_emu_device_accessible until cleared.
void add_device_range(const void* p, std::size_t bytes);
void clear_device_ranges();
// Runs the host functions cudaLaunchHostFunc queued, in order; returns how many ran.
int run_queued();
// The messages fsdp_emu_report_fault was given (with cudaErrorIllegalAddress only), cleared.
std::vector<std::string> take_faults();

}  // namespace fsdp::emu::testing
