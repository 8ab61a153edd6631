// fake_cuda's registration (core/builtin_devices.cpp calls it): its stream backend, allocator and
// copies.
#include "core/fake_cuda/allocator.h"
#include "core/fake_cuda/context.h"
#include "core/fake_cuda/copies.h"
#include "core/fake_cuda/fake_cuda.h"

namespace fsdp::fake_cuda {

void register_device() {
  register_stream_backend(DeviceType::FakeCUDA, &streams());
  register_allocator(DeviceType::FakeCUDA, &allocator());
  register_device_copy(DeviceType::FakeCUDA, &copy_functions());
}

std::map<std::string, std::int64_t> memory_stats(Device device) {
  return caching_allocator(stream_device(device)).stats().as_torch_dict();
}

}  // namespace fsdp::fake_cuda
