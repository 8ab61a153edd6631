// Kernels' attributes as cudaFuncSetAttribute records them, and the launch rule they change: a
// kernel launches with more than 48 KiB of dynamic shared memory only after opting in to as much
// (cudaFuncAttributeMaxDynamicSharedMemorySize, at most the device's 227 KiB). One copy for the
// emulated runtime (cudart/) and one for the kernels test's stand-in (emu_test_runtime.cpp), so
// both refuse the same calls and launches with the same words.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace fsdp::emu {

// sm_90's limits (cudaDeviceProp): dynamic shared memory a kernel may use without an opt-in, and
// the most an opt-in may ask for.
constexpr std::size_t kSharedMemPerBlock = 48 * 1024;
constexpr std::size_t kSharedMemPerBlockOptin = 227 * 1024;

// cudaFuncSetAttribute(function, attr, value) on `device`: cudaSuccess, or the error CUDA gives
// with `why` set to one line naming the call and the value (what is not emulated is
// cudaErrorNotSupported, said so).
cudaError_t set_func_attribute(int device, const void* function, cudaFuncAttribute attr, int value,
                               std::string& why);

// Empty when `function` may launch on `device` with `bytes` of dynamic shared memory; otherwise
// why not (cudaErrorInvalidValue), naming the bytes and the limit.
std::string dynamic_shared_refusal(int device, const void* function, std::size_t bytes);

}  // namespace fsdp::emu
