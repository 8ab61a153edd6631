// fake_cuda's streams: each stream is a worker thread running its queue in order, so work on two
// streams runs concurrently and an unordered pair of accesses is a real race (wrong numbers, TSan
// reports), as on a GPU. Events are real: a stream counts the items it completed, an event is
// (stream, item number), and Event::block queues a wait for that count on the waiting stream.
// An item that throws does not end the process: its error is kept (as CUDA keeps a kernel's) and
// thrown by the device's next synchronising call (stream, event or device synchronize, a copy to
// the host), once.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/stream.h"

namespace fsdp::fake_cuda {

// One stream's queue and its worker (started at the first item).
class WorkerStream {
 public:
  using ErrorSink = std::function<void(const std::string&)>;
  WorkerStream(Stream stream, ErrorSink on_error);
  WorkerStream(const WorkerStream&) = delete;
  WorkerStream& operator=(const WorkerStream&) = delete;

  std::uint64_t enqueue(std::function<void()> work);  // the item's number
  std::uint64_t last_queued();
  bool completed(std::uint64_t item);
  void wait_completed(std::uint64_t item);  // blocks the caller (host or another worker)

 private:
  void run();
  std::uint64_t enqueue_locked(std::function<void()> work);
  Stream stream_;
  ErrorSink on_error_;
  std::mutex mutex_;
  std::condition_variable work_arrived_, item_done_;
  std::deque<std::function<void()>> queue_;
  std::uint64_t queued_ = 0, completed_ = 0;
  bool started_ = false;
};

class FakeStreams final : public StreamBackend {
 public:
  // torch keeps 32 streams per device and hands them out round robin; so does new_stream here
  // (ids 1 to 32; 0 is the default stream).
  static constexpr int kStreamsPerDevice = 32;
  static constexpr int kMaxDevices = 16;

  Stream new_stream(Device device, int priority) override;
  void launch(const Stream& stream, std::function<void()> work) override;
  std::uint64_t record(const Stream& stream) override;
  bool query(const Stream& stream, std::uint64_t sequence) override;
  void synchronize(const Stream& stream, std::uint64_t sequence) override;
  void wait(const Stream& waiter, const Stream& stream, std::uint64_t sequence) override;
  void synchronize_device(Device device) override;

  // Wait without reporting kernel errors (the allocator's waits, under its lock).
  void wait_quietly(const Stream& stream, std::uint64_t sequence);
  void wait_device_quietly(Device device);  // for the work queued on every stream so far
  // Throws the device's kept error, if any, and forgets it.
  void throw_pending_error(Device device);

 private:
  struct PerDevice {
    std::mutex mutex;
    std::array<std::unique_ptr<WorkerStream>, kStreamsPerDevice + 1> streams;
    std::uint64_t next_stream = 0;
    std::string error;  // the first failed item's, until reported
  };
  PerDevice& device(Device device);
  WorkerStream& worker(const Stream& stream);
  std::array<PerDevice, kMaxDevices> devices_;
};

}  // namespace fsdp::fake_cuda
