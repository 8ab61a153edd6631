// Storage allocation with statistics (current and peak bytes per device). Later issues measure
// FSDP's memory with these counters, and a rank running as a thread charges its own stats.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"

namespace fsdp {

struct MemoryStats {
  std::atomic<std::int64_t> current_bytes{0};
  std::atomic<std::int64_t> peak_bytes{0};
  std::atomic<std::int64_t> num_allocs{0};
  std::atomic<std::int64_t> num_frees{0};

  void on_alloc(std::int64_t n);
  void on_free(std::int64_t n);
  void reset_peak() { peak_bytes.store(current_bytes.load()); }
};

// Process-wide statistics of one device type (cpu, cuda). Meta tensors allocate nothing.
MemoryStats& global_memory_stats(DeviceType type);

// While alive, storages this thread allocates are (also) charged to `stats`, and their frees
// are charged back to it from whichever thread frees them. Scopes nest; the innermost wins.
class MemoryStatsScope {
 public:
  explicit MemoryStatsScope(std::shared_ptr<MemoryStats> stats);
  ~MemoryStatsScope();
  MemoryStatsScope(const MemoryStatsScope&) = delete;
  MemoryStatsScope& operator=(const MemoryStatsScope&) = delete;
  static std::shared_ptr<MemoryStats> current();

 private:
  std::shared_ptr<MemoryStats> prev_;
};

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
  std::shared_ptr<MemoryStats> scope_stats_;
  std::atomic<std::uint64_t> version_{0};
};

}  // namespace fsdp
