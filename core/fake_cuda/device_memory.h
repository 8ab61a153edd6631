// fake_cuda's device memory: host pages that host code reaches only through copies. Each device
// reserves two equal address ranges: the device range, PROT_NONE for ever, whose addresses are
// the device pointers storages hold (a host dereference faults, as on a GPU), and the host range
// at a fixed offset above it, where the real pages are mapped while a segment is allocated.
// Kernels and copies run on host views (device pointer + offset) made when they are queued.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

namespace fsdp::fake_cuda {

class DeviceMemory {
 public:
  // Address space per device (reserved, not committed: pages exist only while allocated).
  static constexpr std::size_t kCapacity = std::size_t(16) << 30;

  explicit DeviceMemory(int index);  // reserves both ranges; RuntimeError naming the device
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // A segment of `bytes` (a multiple of the page size) in the device range; nullptr when full.
  void* allocate(std::size_t bytes);
  void release(void* ptr);  // its pages go back to the system
  bool contains(const void* ptr) const {
    auto p = static_cast<const char*>(ptr);
    return p >= base_ && p < base_ + kCapacity;
  }
  void* host_view(const void* device_ptr) const {
    return const_cast<char*>(static_cast<const char*>(device_ptr)) + kCapacity;
  }

 private:
  int index_;
  char* base_ = nullptr;  // the device range; the host range is [base_ + kCapacity, + kCapacity)
  std::mutex mutex_;
  std::map<std::size_t, std::size_t> free_;  // offset -> size, first fit, neighbours merged
  std::map<std::size_t, std::size_t> used_;  // offset -> size
};

}  // namespace fsdp::fake_cuda
