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
#include "core/stream.h"

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

// A device allocator. CPU's are built in (64-byte aligned); each accelerator registers its own
// (fake_cuda's: core/fake_cuda/). An accelerator's allocate() serves the calling thread's current
// stream of `device` (core/stream.h), as torch's caching allocator does.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(std::size_t nbytes, Device device) = 0;
  virtual void deallocate(void* ptr, std::size_t nbytes, Device device) = 0;
  // `ptr` (a live block of `device`) is also used on `stream`: its reuse after the free waits for
  // the work queued there by then. Nothing to do where work runs inline (cpu).
  virtual void record_stream(void* /*ptr*/, Device /*device*/, const Stream& /*stream*/) {}
  virtual AllocatorStats stats() const { return {}; }
  virtual void reset_peak_stats() {}
  virtual void empty_cache() {}  // gives cached blocks back to the system
  // The same for one device of the type (an accelerator's allocator keeps one cache per device).
  virtual AllocatorStats stats_for(Device) const { return stats(); }
  virtual void reset_peak_stats_for(Device) { reset_peak_stats(); }
  virtual void empty_cache_for(Device) { empty_cache(); }
  virtual std::string_view name() const = 0;
};
void register_allocator(DeviceType type, Allocator* allocator);
// Page-locked host memory of an accelerator type (CUDA: cudaHostAlloc): copies between it and
// the device are DMA, asynchronous to the host (a copy from it reads it when it runs, in stream
// order), as torch's pin_memory. Null where the type registered none (fake_cuda, cpu).
void register_pinned_host_allocator(DeviceType type, Allocator* allocator);
Allocator* pinned_host_allocator(DeviceType type);
// Throws naming the device if none is registered for its type (meta, or a device not built).
Allocator* allocator_for(Device device);

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
// in-place modification of tensors saved for backward. On an accelerator it belongs to the stream
// current at its allocation: freeing it makes the block reusable at once on that stream only;
// record_stream(s) defers its reuse until the work queued on s by the free is done
// (Tensor.record_stream).
class Storage {
 public:
  Storage(std::size_t nbytes, Device device);
  // Memory this storage does not own (a device's kernels reading a host view of device memory,
  // core/fake_cuda/): never freed, never counted, never resized.
  static std::shared_ptr<Storage> borrowed(void* data, std::size_t nbytes, Device device);
  // Host memory pinned for `accelerator`'s copies (its type's pinned host allocator; ordinary cpu
  // memory where it has none): a cpu storage, counted as cpu memory.
  static std::shared_ptr<Storage> pinned(std::size_t nbytes, Device accelerator);
  bool is_pinned() const { return fixed_allocator_ != nullptr; }
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  Stream stream() const { return Stream{stream_device(device_), stream_id_}; }
  // The memory is also used by work on `stream` (of this storage's device; ValueError otherwise).
  void record_stream(const Stream& stream);
  // Reallocates to `nbytes`, keeping the common prefix. resize(0) frees the memory while views
  // stay valid objects: FSDP frees unsharded parameters this way between uses (the block goes
  // back to the caching allocator, which hands it out again at the next unshard).
  void resize(std::size_t nbytes);

  std::uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void release();
  void copy_prefix(void* fresh, std::size_t nbytes);  // data_'s first bytes into a new block
  struct Borrowed {};
  Storage(Borrowed, void* data, std::size_t nbytes, Device device);
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  Device device_;
  bool borrowed_ = false;
  std::uint64_t stream_id_ = 0;           // of device_: the current stream when data_ was allocated
  Allocator* allocator_ = nullptr;        // the one that allocated data_
  Allocator* fixed_allocator_ = nullptr;  // pinned: allocations come from it, not the device's
  MemoryScopes scopes_;  // those current at construction: resizes and frees are charged to them
  // The category and timeline current when data_ was allocated: its free is recorded there.
  MemoryCategory category_ = MemoryCategory::Other;
  std::shared_ptr<MemoryTimeline> timeline_;
  std::atomic<std::uint64_t> version_{0};
};

}  // namespace fsdp
