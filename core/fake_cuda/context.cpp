#include "core/fake_cuda/context.h"

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <mutex>

#include "core/error.h"
#include "core/fake_cuda/fake_cuda.h"

namespace fsdp::fake_cuda {

namespace {
// Read lock-free by host_view, which every queued kernel and copy calls.
std::array<std::atomic<DeviceMemory*>, FakeStreams::kMaxDevices> g_memory{};
std::mutex g_memory_mutex;

const DeviceMemory* reserved_holding(const void* ptr) {
  for (const auto& m : g_memory)
    if (const DeviceMemory* d = m.load(std::memory_order_acquire); d && d->contains(ptr)) return d;
  return nullptr;
}
}  // namespace

FakeStreams& streams() {
  static auto* s = new FakeStreams;
  return *s;
}

DeviceMemory& memory(int index) {
  if (DeviceMemory* m = g_memory[index].load(std::memory_order_acquire)) return *m;
  std::lock_guard lock(g_memory_mutex);
  if (!g_memory[index]) g_memory[index] = new DeviceMemory(index);
  return *g_memory[index];
}

bool is_device_pointer(const void* ptr) {
  return reserved_holding(ptr) != nullptr;
}

void* host_view(const void* device_ptr, const char* what) {
  if (const DeviceMemory* d = reserved_holding(device_ptr)) return d->host_view(device_ptr);
  throw ValueError(
      fmt::format("fake_cuda: {}: {} is not fake_cuda device memory", what, device_ptr));
}

}  // namespace fsdp::fake_cuda
