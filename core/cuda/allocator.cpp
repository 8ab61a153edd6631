#include "core/cuda/allocator.h"

#include "core/cuda/cuda_memory_backend.h"
#include "core/cuda/devices.h"
#include "core/cuda/streams.h"
#include "core/device_allocator.h"

namespace fsdp::cuda {

namespace {

DeviceAllocator& the_allocator() {
  // Never destroyed: storages freed by static destructors still find it.
  static auto* a = new DeviceAllocator(
      "cuda caching",
      {.check_device = [](Device device) { checked_index(device); },
       .make_backend = [](Device device) { return make_cuda_memory_backend(device.index); },
       .stream_id =
           [](const Stream& stream) {
             return reinterpret_cast<StreamId>(streams().native(stream));
           }});
  return *a;
}

}  // namespace

Allocator& allocator() {
  return the_allocator();
}

CachingDeviceAllocator& caching_allocator(Device device) {
  return the_allocator().of(device);
}

}  // namespace fsdp::cuda
