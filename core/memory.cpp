#include "core/memory.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace fsdp {

namespace {
class CpuAllocator final : public Allocator {
 public:
  void* allocate(std::size_t nbytes, Device) override {
    if (nbytes == 0) return nullptr;
    std::size_t rounded = (nbytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p)
      throw RuntimeError(fmt::format("cpu allocator: out of memory allocating {} bytes", nbytes));
    return p;
  }
  void deallocate(void* ptr, std::size_t, Device) override { std::free(ptr); }
};

CpuAllocator g_cpu_allocator;
Allocator* g_allocators[3] = {&g_cpu_allocator, nullptr, nullptr};
std::mutex g_alloc_registry_mutex;
}  // namespace

void register_allocator(DeviceType type, Allocator* allocator) {
  std::lock_guard<std::mutex> lock(g_alloc_registry_mutex);
  g_allocators[static_cast<int>(type)] = allocator;
}

Allocator* allocator_for(Device device) {
  if (device.is_meta())
    throw RuntimeError("meta tensors have no storage: cannot allocate data on the meta device");
  Allocator* a = g_allocators[static_cast<int>(device.type)];
  if (!a)
    throw RuntimeError(
        fmt::format("no allocator for device {}: this build has no CUDA support (reconfigure with "
                    "-Dcuda=enabled on a machine with the CUDA toolkit)",
                    device.str()));
  return a;
}

Storage::Storage(std::size_t nbytes, Device device) : device_(device) {
  if (device.is_meta()) {
    nbytes_ = nbytes;  // shape bookkeeping only
    return;
  }
  scopes_ = MemoryScopes::current();
  resize(nbytes);
}

Storage::~Storage() {
  release();
}

void Storage::release() {
  if (device_.is_meta() || !data_) {
    if (!device_.is_meta()) nbytes_ = 0;
    return;
  }
  allocator_for(device_)->deallocate(data_, nbytes_, device_);
  global_memory_stats(device_.type).on_free(static_cast<std::int64_t>(nbytes_));
  scopes_.on_free(static_cast<std::int64_t>(nbytes_));
  data_ = nullptr;
  nbytes_ = 0;
}

void Storage::resize(std::size_t nbytes) {
  if (device_.is_meta()) {
    nbytes_ = nbytes;
    return;
  }
  if (nbytes == nbytes_ && (data_ || nbytes == 0)) return;
  void* fresh = nullptr;
  if (nbytes > 0) {
    fresh = allocator_for(device_)->allocate(nbytes, device_);
    global_memory_stats(device_.type).on_alloc(static_cast<std::int64_t>(nbytes));
    scopes_.on_alloc(static_cast<std::int64_t>(nbytes));
    if (data_ && device_.is_cpu()) std::memcpy(fresh, data_, std::min(nbytes, nbytes_));
  }
  release();
  data_ = fresh;
  nbytes_ = nbytes;
}

}  // namespace fsdp
