// Storage allocation with statistics (core/memory_stats.h: current and peak bytes per device and
// per scope). FSDP's memory is measured with these counters; a rank running as a thread charges
// its own scope. CPU memory comes from a caching allocator by default (core/caching_allocator.h):
// FSDP_CPU_ALLOCATOR=malloc or set_cpu_allocator() selects the plain one.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "core/device.h"
#include "core/memory_stats.h"

namespace fsdp {

// An allocator's counters, named as torch.cuda.memory_stats() names them. Allocated bytes are
// those of blocks handed out (rounded up); reserved bytes are those held from the system
// (allocated + cached). The plain allocator caches nothing: reserved equals allocated.
struct AllocatorStats {
  std::int64_t allocated_bytes = 0, allocated_bytes_peak = 0;
  std::int64_t reserved_bytes = 0, reserved_bytes_peak = 0;
  std::int64_t requested_bytes = 0, requested_bytes_peak = 0;  // as asked, before rounding
  std::int64_t num_allocs = 0, num_frees = 0;
  std::int64_t cache_hits = 0, cache_misses = 0;  // allocations served from / not from the cache
  std::int64_t num_system_allocs = 0, num_system_frees = 0;  // blocks taken from / given back
  std::int64_t num_alloc_retries = 0;  // system allocations retried after emptying the cache
  std::int64_t num_splits = 0, num_merges = 0;  // cached blocks split to serve / merged when freed
  std::int64_t cached_blocks = 0;
};

// A device allocator. CPU's are built in (64-byte aligned); a CUDA build registers its own.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(std::size_t nbytes, Device device) = 0;
  virtual void deallocate(void* ptr, std::size_t nbytes, Device device) = 0;
  virtual AllocatorStats stats() const { return {}; }
  virtual void reset_peak_stats() {}
  virtual void empty_cache() {}  // gives cached blocks back to the system
  virtual std::string_view name() const = 0;
};
void register_allocator(DeviceType type, Allocator* allocator);
Allocator* allocator_for(Device device);  // throws if none is registered for that device type

// The CPU allocators. The default is FSDP_CPU_ALLOCATOR's (`caching` if unset; `malloc` in an
// AddressSanitizer build). A storage is always freed by the allocator that allocated it, so
// switching at any time is safe.
enum class CpuAllocatorKind { Caching, Malloc };
void set_cpu_allocator(CpuAllocatorKind kind);
CpuAllocatorKind cpu_allocator_kind();
Allocator& cpu_allocator(CpuAllocatorKind kind);
// "caching" | "malloc"; anything else is a ValueError naming FSDP_CPU_ALLOCATOR and the value.
CpuAllocatorKind parse_cpu_allocator_kind(std::string_view value);
std::string_view cpu_allocator_kind_name(CpuAllocatorKind kind);

// The current allocator of `device`'s type: its statistics, and release of its cached blocks.
AllocatorStats allocator_stats(Device device = kCPU);
void reset_allocator_peak_stats(Device device = kCPU);
void empty_cache(Device device = kCPU);

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
  // stay valid objects: FSDP frees unsharded parameters this way between uses (the block goes
  // back to the caching allocator, which hands it out again at the next unshard).
  void resize(std::size_t nbytes);

  std::uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void release();
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;  // the one that allocated data_
  MemoryScopes scopes_;  // those current at construction: resizes and frees are charged to them
  // The category and timeline current when data_ was allocated: its free is recorded there.
  MemoryCategory category_ = MemoryCategory::Other;
  std::shared_ptr<MemoryTimeline> timeline_;
  std::atomic<std::uint64_t> version_{0};
};

}  // namespace fsdp
