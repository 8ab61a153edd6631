#include "core/device_allocator.h"

#include "core/error.h"
#include "core/stream.h"

namespace fsdp {

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

void* DeviceAllocator::allocate(std::size_t nbytes, Device device) {
  const Stream s = current_stream(device);
  return of(s.device).allocate(nbytes, hooks_.stream_id(s));
}

void DeviceAllocator::deallocate(void* ptr, std::size_t, Device device) {
  of(stream_device(device)).free(ptr);
}

void DeviceAllocator::record_stream(void* ptr, Device device, const Stream& stream) {
  of(stream_device(device)).record_stream(ptr, hooks_.stream_id(stream));
}

// Without a device: all devices together (device 0 in practice).
AllocatorStats DeviceAllocator::stats() const {
  AllocatorStats sum;
  for (const auto& cache : caches_)
    if (const CachingDeviceAllocator* a = cache.load()) {
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

void DeviceAllocator::reset_peak_stats() {
  for (auto& cache : caches_)
    if (CachingDeviceAllocator* a = cache.load()) a->reset_peak_stats();
}

void DeviceAllocator::empty_cache() {
  for (auto& cache : caches_)
    if (CachingDeviceAllocator* a = cache.load()) a->empty_cache();
}

AllocatorStats DeviceAllocator::stats_for(Device device) const {
  return as_allocator_stats(of(stream_device(device)).stats());
}

void DeviceAllocator::reset_peak_stats_for(Device device) {
  of(stream_device(device)).reset_peak_stats();
}

void DeviceAllocator::empty_cache_for(Device device) {
  of(stream_device(device)).empty_cache();
}

CachingDeviceAllocator& DeviceAllocator::of(Device device) const {
  hooks_.check_device(device);
  FSDP_CHECK(device.index >= 0 && device.index < kMaxDevices, ValueError,
             "{}: device index out of range ({} has devices 0 to {})", device.str(), name_,
             kMaxDevices - 1);
  if (CachingDeviceAllocator* a = caches_[device.index].load(std::memory_order_acquire)) return *a;
  std::lock_guard lock(mutex_);
  if (!caches_[device.index])
    caches_[device.index] = new CachingDeviceAllocator(hooks_.make_backend(device), device.str());
  return *caches_[device.index];
}

}  // namespace fsdp
