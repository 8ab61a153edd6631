// Storage allocation with statistics (core/memory_stats.h: current and peak bytes per device and
// per scope). FSDP's memory is measured with these counters; a rank running as a thread charges
// its own scope.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"
#include "core/memory_stats.h"

namespace fsdp {

// A device allocator. CPU's is built in (64-byte aligned); a CUDA build registers its own.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(std::size_t nbytes, Device device) = 0;
  virtual void deallocate(void* ptr, std::size_t nbytes, Device device) = 0;
};
void register_allocator(DeviceType type, Allocator* allocator);
Allocator* allocator_for(Device device);  // throws if none is registered for that device type

// One contiguous allocation. Views share it; it carries the version counter that detects
// in-place modification of tensors saved for backward.
class Storage {
 public:
  Storage(std::size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // Reallocates to `nbytes`, keeping the common prefix. resize(0) frees the memory while views
  // stay valid objects: FSDP frees unsharded parameters this way between uses.
  void resize(std::size_t nbytes);

  std::uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void release();
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  Device device_;
  MemoryScopes scopes_;  // those current at construction: resizes and frees are charged to them
  std::atomic<std::uint64_t> version_{0};
};

}  // namespace fsdp
