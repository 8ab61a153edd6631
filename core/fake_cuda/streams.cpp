#include "core/fake_cuda/streams.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/start_thread.h"
#include "core/stream_sanitizer.h"

namespace fsdp::fake_cuda {

WorkerStream::WorkerStream(Stream stream, ErrorSink on_error)
    : stream_(stream), on_error_(std::move(on_error)) {}

std::uint64_t WorkerStream::enqueue(std::function<void()> work) {
  const std::uint64_t item = enqueue_locked(std::move(work));
  stream_sanitizer::on_launch(stream_, item);
  return item;
}

std::uint64_t WorkerStream::enqueue_locked(std::function<void()> work) {
  std::lock_guard lock(mutex_);
  if (!started_) {
    // Detached: the device lives until the process ends, as a CUDA context does, so a
    // storage freed by a static destructor never finds its streams gone.
    start_thread(fmt::format("the worker of {} stream {}", stream_.device.str(), stream_.id),
                 [this] { run(); })
        .detach();
    started_ = true;
  }
  queue_.push_back(std::move(work));
  work_arrived_.notify_one();
  return ++queued_;
}

std::uint64_t WorkerStream::last_queued() {
  std::lock_guard lock(mutex_);
  return queued_;
}

bool WorkerStream::completed(std::uint64_t item) {
  std::lock_guard lock(mutex_);
  return completed_ >= item;
}

void WorkerStream::wait_completed(std::uint64_t item) {
  std::unique_lock lock(mutex_);
  item_done_.wait(lock, [&] { return completed_ >= item; });
}

void WorkerStream::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_arrived_.wait(lock, [&] { return !queue_.empty(); });
    std::function<void()> work = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    try {
      work();
    } catch (const std::exception& e) {
      on_error_(e.what());
    } catch (...) {
      on_error_("unknown exception");
    }
    work = nullptr;  // what it captured goes before the item counts as done
    lock.lock();
    ++completed_;
    item_done_.notify_all();
  }
}

FakeStreams::PerDevice& FakeStreams::device(Device device) {
  FSDP_CHECK(device.index >= 0 && device.index < kMaxDevices, ValueError,
             "{}: no such device (fake_cuda has devices 0 to {})", device.str(), kMaxDevices - 1);
  return devices_[device.index];
}

WorkerStream& FakeStreams::worker(const Stream& stream) {
  const Device d = stream_device(stream.device);
  FSDP_CHECK(stream.id <= std::uint64_t(kStreamsPerDevice), ValueError,
             "{}: no stream {} (new_stream gives ids 1 to {}; 0 is the default stream)", d.str(),
             stream.id, kStreamsPerDevice);
  PerDevice& per = device(d);
  std::lock_guard lock(per.mutex);
  auto& w = per.streams[stream.id];
  if (!w)
    w = std::make_unique<WorkerStream>(
        Stream{d, stream.id}, [&per, d, id = stream.id](const std::string& what) {
          std::lock_guard lock(per.mutex);
          if (per.error.empty())
            per.error = fmt::format("{}: work queued on stream {} failed: {}", d.str(), id, what);
        });
  return *w;
}

Stream FakeStreams::new_stream(Device device, int) {
  PerDevice& per = this->device(device);
  std::lock_guard lock(per.mutex);
  return Stream{device, 1 + per.next_stream++ % kStreamsPerDevice};
}

void FakeStreams::launch(const Stream& stream, std::function<void()> work) {
  worker(stream).enqueue(std::move(work));
}

std::uint64_t FakeStreams::record(const Stream& stream) {
  const std::uint64_t item = worker(stream).last_queued();
  stream_sanitizer::on_record(stream, item);
  return item;
}

bool FakeStreams::query(const Stream& stream, std::uint64_t sequence) {
  return worker(stream).completed(sequence);
}

void FakeStreams::wait_quietly(const Stream& stream, std::uint64_t sequence) {
  worker(stream).wait_completed(sequence);
}

void FakeStreams::throw_pending_error(Device device) {
  PerDevice& per = this->device(stream_device(device));
  std::string error;
  {
    std::lock_guard lock(per.mutex);
    error.swap(per.error);
  }
  if (!error.empty()) throw RuntimeError(error);
}

void FakeStreams::synchronize(const Stream& stream, std::uint64_t sequence) {
  wait_quietly(stream, sequence);
  stream_sanitizer::on_synchronize(stream, sequence);
  throw_pending_error(stream.device);
}

void FakeStreams::wait(const Stream& waiter, const Stream& stream, std::uint64_t sequence) {
  if (sequence == 0) return;
  stream_sanitizer::on_wait(waiter, stream, sequence);
  WorkerStream* other = &worker(stream);
  worker(waiter).enqueue([other, sequence] { other->wait_completed(sequence); });
}

void FakeStreams::synchronize_device(Device device) {
  wait_device_quietly(device);
  stream_sanitizer::on_synchronize_device(device);
  throw_pending_error(device);
}

void FakeStreams::wait_device_quietly(Device device) {
  PerDevice& per = this->device(device);
  std::array<WorkerStream*, kStreamsPerDevice + 1> started{};
  {
    std::lock_guard lock(per.mutex);
    for (std::size_t i = 0; i < started.size(); ++i) started[i] = per.streams[i].get();
  }
  for (WorkerStream* w : started)
    if (w) w->wait_completed(w->last_queued());
}

}  // namespace fsdp::fake_cuda
