// What the emulated CUDA runtime (cudart/, an emulated libcudart with the real one's soname)
// adds to CUDA's API for the emulated kernels' library (emu_cuda.h) and the emulated cuBLASLt:
// launches in stream order, the device-memory map that checks kernels' pointer arguments, and
// faults raised while a kernel runs. Every call is C, so that the three libraries meet only
// through this header and the CUDA headers.
#pragma once

#include <cuda_runtime_api.h>
#include <vector_types.h>

#include <cstddef>

extern "C" {

// Checks a launch's configuration as CUDA does (block at most 1024 threads and 1024/1024/64 a
// dimension, grid x below 2^31 and y, z at most 65535, no zero dimension, dynamic shared memory
// at most 48 KiB, or what the kernel opted in to with cudaFuncSetAttribute, up to the device's
// 227 KiB); on success queues `run(closure)` on `stream` in stream order and returns
// cudaSuccess; otherwise the error, kept as the calling thread's last error (cudaGetLastError),
// `run` never called. `destroy(closure)` is called once in either case, after `run` when it ran.
// `kernel` names the kernel in messages; `function` is its address, as cudaFuncSetAttribute
// receives it (the host function the kernel compiles to here).
cudaError_t fsdp_emu_launch(cudaStream_t stream, dim3 grid, dim3 block,
                            std::size_t dynamic_shared_bytes, const char* kernel,
                            const void* function, void (*run)(void*), void* closure,
                            void (*destroy)(void*));

// Whether a kernel may dereference `p`: inside a live cudaMalloc/cudaMallocAsync allocation or
// pinned host memory (cudaMallocHost). Null is not accessible.
int fsdp_emu_device_accessible(const void* p);

// A launch refused before it runs (a pointer argument a kernel cannot access): prints
// `message` to stderr, keeps `error` as the calling thread's last error and returns it.
cudaError_t fsdp_emu_launch_error(cudaError_t error, const char* message);

// A fault while a kernel runs on a stream's worker (a barrier no thread can pass, an access
// outside the device's memory): prints `message` to stderr and makes `error` sticky, as CUDA's
// asynchronous faults are: every later synchronising call returns it.
void fsdp_emu_report_fault(cudaError_t error, const char* message);

}  // extern "C"
