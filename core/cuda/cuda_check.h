// One check for every CUDA runtime call (and cuBLAS(Lt)'s: cublaslt_library.h's overload): a
// failure throws fsdp::RuntimeError naming the status, its text, the call as written and file:line.
// After every kernel launch, FSDP_CUDA_CHECK_LAUNCH() turns a bad launch (grid too large, too much
// shared memory) into the same error at the launch site rather than at some later, unrelated call.
// NCCL calls keep comm/nccl's FSDP_NCCL_CHECK (same form): core may not include NCCL
// (check_layering.sh).
#pragma once

#include <cuda_runtime_api.h>

// No fmt here (core/error.h): nvcc 13 cannot compile fmt 9 in C++20 mode, and .cu files include
// this header. throw_cuda_error lives in cuda_errors.cpp, compiled by the host compiler.

namespace fsdp::cuda {

[[noreturn]] void throw_cuda_error(const char* status_name, const char* status_text,
                                   const char* call, const char* file, int line);
// fsdp::ValueError "<op>: <what>, got <value>", for the argument checks of .cu files.
[[noreturn]] void throw_value_error(const char* op, const char* what, long long value);

inline void check_status(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  // A failed call also leaves its status as the runtime's last error: read it (clearing it) so
  // that the next launch check judges that launch alone, not this call.
  (void)cudaGetLastError();
  throw_cuda_error(cudaGetErrorName(status), cudaGetErrorString(status), call, file, line);
}

}  // namespace fsdp::cuda

#define FSDP_CUDA_CHECK(call) ::fsdp::cuda::check_status((call), #call, __FILE__, __LINE__)
// cudaGetLastError also clears the error, so the next launch is judged on its own.
#define FSDP_CUDA_CHECK_LAUNCH() \
  ::fsdp::cuda::check_status(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
