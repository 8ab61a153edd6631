#include "core/fake_cuda/allocator.h"

#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/device_allocator.h"
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

DeviceAllocator& the_allocator() {
  // Never destroyed: see context.h.
  static auto* a = new DeviceAllocator(
      "fake_cuda caching",
      {.check_device =
           [](Device device) {
             FSDP_CHECK(device.index >= 0 && device.index < kMaxDevices, ValueError,
                        "{}: no such device (fake_cuda has devices 0 to {})", device.str(),
                        kMaxDevices - 1);
           },
       .make_backend = [](Device device) -> std::unique_ptr<DeviceMemoryBackend> {
         return std::make_unique<MemoryBackend>(device);
       },
       .stream_id = [](const Stream& stream) { return StreamId(stream.id); }});
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
