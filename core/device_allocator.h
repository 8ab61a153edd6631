// An accelerator type's Allocator (core/memory.h): one CachingDeviceAllocator per device index,
// made at the device's first allocation over the backend the device type supplies, serving the
// calling thread's current stream; statistics per device (stats_for) and for all devices
// together (stats). fake_cuda's and CUDA's allocators are this class with their own backend,
// stream handles and device check.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "core/caching_device_allocator.h"
#include "core/memory.h"

namespace fsdp {

AllocatorStats as_allocator_stats(const DeviceAllocatorStats& stats);

class DeviceAllocator final : public Allocator {
 public:
  static constexpr int kMaxDevices = 16;
  struct Hooks {
    // Throws naming the device when it does not exist; `device` has an index.
    std::function<void(Device)> check_device;
    std::function<std::unique_ptr<DeviceMemoryBackend>(Device)> make_backend;
    std::function<StreamId(const Stream&)> stream_id;  // the pool key of a stream
  };
  DeviceAllocator(std::string name, Hooks hooks)
      : name_(std::move(name)), hooks_(std::move(hooks)) {}

  void* allocate(std::size_t nbytes, Device device) override;
  void deallocate(void* ptr, std::size_t nbytes, Device device) override;
  void record_stream(void* ptr, Device device, const Stream& stream) override;
  AllocatorStats stats() const override;
  void reset_peak_stats() override;
  void empty_cache() override;
  AllocatorStats stats_for(Device device) const override;
  void reset_peak_stats_for(Device device) override;
  void empty_cache_for(Device device) override;
  std::string_view name() const override { return name_; }

  CachingDeviceAllocator& of(Device device) const;  // checked; made at first use

 private:
  std::string name_;
  Hooks hooks_;
  mutable std::array<std::atomic<CachingDeviceAllocator*>, kMaxDevices> caches_{};
  mutable std::mutex mutex_;
};

}  // namespace fsdp
