// The cuda_emulated_kernels test's own stand-in for the emulated CUDA runtime (emu_runtime.h and
// the few runtime calls core/cuda's launchers make: cudaGetLastError, the error names,
// cudaMemsetAsync, cudaFuncSetAttribute), so the kernels and the executor are tested before the
// runtime exists. Launches run at once on the calling thread (dynamic shared memory checked against
// the kernel's opt-in, emu_func_attributes.h, as the runtime checks it); every pointer is device
// memory except those in the ranges a test registers as host memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace fsdp::emu::test {

// Pointers in [p, p + bytes) are host memory (not accessible by kernels) until clear_host().
void register_host(const void* p, std::size_t bytes);
void clear_host();

// The message of the last launch or cudaFuncSetAttribute refused (fsdp_emu_launch_error) and of
// the last fault (fsdp_emu_report_fault); taking one clears it.
std::string take_launch_error();
std::string take_fault();
// Launches run so far (fsdp_emu_launch calls).
int launches();

}  // namespace fsdp::emu::test
