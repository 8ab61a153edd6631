#include "core/fake_cuda/allocator.h"

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/error.h"
#include "core/fake_cuda/context.h"

namespace fsdp::fake_cuda {

namespace {

constexpr int kMaxDevices = FakeStreams::kMaxDevices;

// The caching allocator's view of the device: segments from DeviceMemory, events on its streams.
class MemoryBackend final : public DeviceMemoryBackend {
 public:
  explicit MemoryBackend(Device device) : device_(device), memory_(memory(device.index)) {}
  void* allocate(std::size_t bytes) override { return memory_.allocate(bytes); }
  // cudaFree waits for the device: work still queued on a freed block's own stream (where a
  // block is reused without an event) must not find its pages gone.
  void release(void* ptr) override {
    streams().wait_device_quietly(device_);
    memory_.release(ptr);
  }
  EventId record_event(StreamId stream) override {
    std::lock_guard lock(mutex_);
    const Stream s{device_, stream};
    events_[++next_] = Event{s, streams().record(s)};
    return next_;
  }
  bool event_done(EventId id) override {
    const Event e = find(id);
    return streams().query(e.stream, e.sequence);
  }
  void synchronize_event(EventId id) override {
    const Event e = find(id);
    streams().wait_quietly(e.stream, e.sequence);
  }
  void destroy_event(EventId id) override {
    std::lock_guard lock(mutex_);
    events_.erase(id);
  }

 private:
  struct Event {
    Stream stream;
    std::uint64_t sequence;
  };
  Event find(EventId id) {
    std::lock_guard lock(mutex_);
    return events_.at(id);
  }
  Device device_;
  DeviceMemory& memory_;
  std::mutex mutex_;
  std::unordered_map<EventId, Event> events_;
  EventId next_ = 0;
};

AllocatorStats as_allocator_stats(const DeviceAllocatorStats& d) {
  AllocatorStats s;
  s.allocated_bytes = d.allocated_bytes.current;
  s.allocated_bytes_peak = d.allocated_bytes.peak;
  s.reserved_bytes = d.reserved_bytes.current;
  s.reserved_bytes_peak = d.reserved_bytes.peak;
  s.requested_bytes = d.requested_bytes.current;
  s.requested_bytes_peak = d.requested_bytes.peak;
  s.num_allocs = d.allocation.allocated;
  s.num_frees = d.allocation.freed;
  s.cache_misses = d.num_device_alloc + d.num_ooms;
  s.cache_hits = s.num_allocs - d.num_device_alloc;
  s.num_system_allocs = d.num_device_alloc;
  s.num_system_frees = d.num_device_free;
  s.num_alloc_retries = d.num_alloc_retries;
  s.num_splits = d.num_splits;
  s.num_merges = d.num_merges;
  s.cached_blocks = d.cached_blocks;
  return s;
}

class FakeCudaAllocator final : public Allocator {
 public:
  void* allocate(std::size_t nbytes, Device device) override {
    const Stream s = current_stream(device);
    return of(s.device).allocate(nbytes, s.id);
  }
  void deallocate(void* ptr, std::size_t, Device device) override {
    of(stream_device(device)).free(ptr);
  }
  void record_stream(void* ptr, Device device, const Stream& stream) override {
    of(stream_device(device)).record_stream(ptr, stream.id);
  }
  // Without a device: all devices together (fake_cuda:0 in practice).
  AllocatorStats stats() const override {
    AllocatorStats sum;
    for (int i = 0; i < kMaxDevices; ++i)
      if (const CachingDeviceAllocator* a = caches_[i].load()) {
        const AllocatorStats s = as_allocator_stats(a->stats());
        for (auto field : {&AllocatorStats::allocated_bytes, &AllocatorStats::allocated_bytes_peak,
                           &AllocatorStats::reserved_bytes, &AllocatorStats::reserved_bytes_peak,
                           &AllocatorStats::requested_bytes, &AllocatorStats::requested_bytes_peak,
                           &AllocatorStats::num_allocs, &AllocatorStats::num_frees,
                           &AllocatorStats::cache_hits, &AllocatorStats::cache_misses,
                           &AllocatorStats::num_system_allocs, &AllocatorStats::num_system_frees,
                           &AllocatorStats::num_alloc_retries, &AllocatorStats::num_splits,
                           &AllocatorStats::num_merges, &AllocatorStats::cached_blocks})
          sum.*field += s.*field;
      }
    return sum;
  }
  void reset_peak_stats() override {
    for (int i = 0; i < kMaxDevices; ++i)
      if (CachingDeviceAllocator* a = caches_[i].load()) a->reset_peak_stats();
  }
  void empty_cache() override {
    for (int i = 0; i < kMaxDevices; ++i)
      if (CachingDeviceAllocator* a = caches_[i].load()) a->empty_cache();
  }
  AllocatorStats stats_for(Device device) const override {
    return as_allocator_stats(of(stream_device(device)).stats());
  }
  void reset_peak_stats_for(Device device) override {
    of(stream_device(device)).reset_peak_stats();
  }
  void empty_cache_for(Device device) override { of(stream_device(device)).empty_cache(); }
  std::string_view name() const override { return "fake_cuda caching"; }

  CachingDeviceAllocator& of(Device device) const {
    FSDP_CHECK(device.index >= 0 && device.index < kMaxDevices, ValueError,
               "{}: no such device (fake_cuda has devices 0 to {})", device.str(), kMaxDevices - 1);
    if (CachingDeviceAllocator* a = caches_[device.index].load(std::memory_order_acquire))
      return *a;
    std::lock_guard lock(mutex_);
    if (!caches_[device.index])
      caches_[device.index] =
          new CachingDeviceAllocator(std::make_unique<MemoryBackend>(device), device.str());
    return *caches_[device.index];
  }

 private:
  mutable std::array<std::atomic<CachingDeviceAllocator*>, kMaxDevices> caches_{};
  mutable std::mutex mutex_;
};

FakeCudaAllocator& the_allocator() {
  static auto* a = new FakeCudaAllocator;  // never destroyed: see context.h
  return *a;
}

}  // namespace

Allocator& allocator() {
  return the_allocator();
}

CachingDeviceAllocator& caching_allocator(Device device) {
  return the_allocator().of(device);
}

}  // namespace fsdp::fake_cuda
