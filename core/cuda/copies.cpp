#include "core/cuda/copies.h"

#include <cuda_runtime_api.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/devices.h"
#include "core/cuda/streams.h"

namespace fsdp::cuda {

namespace {

void copy_async(void* dst, const void* src, std::size_t nbytes, const Stream& stream,
                cudaMemcpyKind kind) {
  cudaStream_t handle = streams().native(stream);
  DeviceGuard guard(stream_device(stream.device).index);
  FSDP_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, handle));
}

void host_to_device(void* dst, const void* src, std::size_t nbytes, const Stream& stream) {
  copy_async(dst, src, nbytes, stream, cudaMemcpyHostToDevice);
}

void device_to_host(void* dst, const void* src, std::size_t nbytes, const Stream& stream) {
  copy_async(dst, src, nbytes, stream, cudaMemcpyDeviceToHost);
  stream.synchronize();  // through the backend: a failed kernel before the copy throws here
}

void device_to_device(void* dst, const void* src, std::size_t nbytes, const Stream& stream) {
  // cudaMemcpyDefault: the pointers say which devices (a peer copy when they differ).
  copy_async(dst, src, nbytes, stream, cudaMemcpyDefault);
}

}  // namespace

const DeviceCopyFunctions& copy_functions() {
  static const DeviceCopyFunctions functions{host_to_device, device_to_host, device_to_device,
                                             nullptr};
  return functions;
}

}  // namespace fsdp::cuda
