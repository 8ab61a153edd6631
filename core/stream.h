// Streams and events, torch.cuda's semantics for every device: work queued on one stream runs in
// order, asynchronously to the host on an accelerator; an event marks the work queued on a stream
// so far, and another stream (or the host) can wait for it. Each thread has a current stream per
// device (the default stream, id 0, unless set). A StreamBackend per device type does the work:
// CPU's is trivial (one stream, work runs inline, events complete at once); fake_cuda's runs each
// stream on a worker thread (core/fake_cuda/); CUDA's will wrap cudaStream_t.
#pragma once

#include <cstdint>
#include <functional>

#include "core/device.h"

namespace fsdp {

class Event;

// A stream of `device` (whose index is never -1: "fake_cuda" means fake_cuda:0). Id 0 is the
// device's default stream; a value, cheap to copy and compare.
struct Stream {
  Device device;
  std::uint64_t id = 0;

  void synchronize() const;                     // the host waits for all work queued on it so far
  bool query() const;                           // whether all work queued on it so far is done
  void wait_stream(const Stream& other) const;  // later work here waits for other's work so far
  void wait_event(const Event& event) const;    // later work here waits for the event's work
  friend bool operator==(const Stream&, const Stream&) = default;
};

// A point in a stream's work: recording it marks the work queued so far. An event never recorded
// is complete (torch.cuda.Event's semantics). A value: copies name the same point.
class Event {
 public:
  explicit Event(Device device = kCPU) : stream_{device, 0} {}
  void record();  // on the current stream of its device
  void record(const Stream& stream);
  void block(const Stream& stream) const;  // work queued on `stream` from now waits for it
  bool query() const;
  void synchronize() const;  // the host waits for it; a failed kernel before it throws here
  bool recorded() const { return recorded_; }
  const Stream& stream() const { return stream_; }
  std::uint64_t sequence() const { return sequence_; }  // the stream's work item it waits for

 private:
  Stream stream_;
  std::uint64_t sequence_ = 0;  // 0: nothing (an idle stream's event is complete at once)
  bool recorded_ = false;
};

// The device side of streams for one device type. Work items are numbered per stream from 1 in
// the order queued; an event is (stream, the number of the last item queued when recorded).
class StreamBackend {
 public:
  virtual ~StreamBackend() = default;
  // A stream other than the default; `priority` as torch's (lower runs first), a hint only.
  virtual Stream new_stream(Device device, int priority) = 0;
  virtual void launch(const Stream& stream, std::function<void()> work) = 0;
  virtual std::uint64_t record(const Stream& stream) = 0;  // the number of the last item queued
  virtual bool query(const Stream& stream, std::uint64_t sequence) = 0;
  // The host waits until `stream` completed item `sequence`; rethrows a failed item's error.
  virtual void synchronize(const Stream& stream, std::uint64_t sequence) = 0;
  // Work queued on `waiter` from now runs after `stream`'s item `sequence` completed.
  virtual void wait(const Stream& waiter, const Stream& stream, std::uint64_t sequence) = 0;
  virtual void synchronize_device(Device device) = 0;  // every stream of the device
};
void register_stream_backend(DeviceType type, StreamBackend* backend);
// Throws naming the device when its type has none (meta; fake_cuda or cuda not built).
StreamBackend& stream_backend(Device device);

// The device a stream or storage of `device` is on: index -1 (the current device) becomes 0.
Device stream_device(Device device);

Stream default_stream(Device device);
Stream current_stream(Device device);  // this thread's for `device`; the default one at first
void set_current_stream(const Stream& stream);
Stream new_stream(Device device, int priority = 0);
void device_synchronize(Device device);
// Runs `work` on `stream`: inline on CPU, queued on an accelerator. Queued work must own no
// storage (as a GPU kernel holds none): what it touches is kept alive by its owners, ordered by
// events and record_stream (core/memory.h). Nor may it allocate device memory, as a kernel
// cannot: the allocator waits for streams' work under its lock.
void launch(const Stream& stream, std::function<void()> work);

// Makes `stream` the current stream of its device while alive (torch.cuda.stream(s)).
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

}  // namespace fsdp
