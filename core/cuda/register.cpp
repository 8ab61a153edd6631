// The CUDA device's registration (core/builtin_devices.h).
#include "core/cuda/allocator.h"
#include "core/cuda/async_allocator.h"
#include "core/cuda/copies.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/pinned_allocator.h"
#include "core/cuda/streams.h"
#include "core/cuda/timing_marks.h"
#include "core/native_stream.h"

namespace fsdp::cuda {

void register_device() {
  register_stream_backend(DeviceType::CUDA, &streams());
  // FSDP_CUDA_ALLOC_CONF: the caching allocator, or the driver's pool (async_allocator.h).
  register_allocator(DeviceType::CUDA, configured_backend() == AllocatorBackend::CudaMallocAsync
                                           ? &async_allocator()
                                           : &allocator());
  register_pinned_host_allocator(DeviceType::CUDA, &pinned_host_allocator());
  register_device_copy(DeviceType::CUDA, &copy_functions());
  register_native_stream(DeviceType::CUDA,
                         [](const Stream& s) -> void* { return streams().native(s); });
  register_timing_marks(DeviceType::CUDA, &fsdp::cuda::timing_mark);
}

std::map<std::string, std::int64_t> memory_stats(Device device) {
  if (configured_backend() == AllocatorBackend::CudaMallocAsync)
    return async_memory_stats(stream_device(device));
  return caching_allocator(stream_device(device)).stats().as_torch_dict();
}

}  // namespace fsdp::cuda
