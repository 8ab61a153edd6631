#include "core/cuda/streams.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/cuda/cuda_check.h"
#include "core/cuda/devices.h"
#include "core/cuda/index_fault.h"
#include "core/error.h"
#include "core/stream_sanitizer.h"

namespace fsdp::cuda {

namespace {

// What cudaLaunchHostFunc runs: the work and where its failure is kept.
struct HostWork {
  std::function<void()> work;
  std::function<void(const std::string&)> on_error;
};

void CUDART_CB run_host_work(void* data) {
  std::unique_ptr<HostWork> w(static_cast<HostWork*>(data));
  try {
    w->work();
  } catch (const std::exception& e) {
    w->on_error(e.what());
  } catch (...) {
    w->on_error("unknown exception");
  }
}

}  // namespace

CudaStreams& streams() {
  static auto* s = new CudaStreams;
  return *s;
}

CudaStreams::PerDevice& CudaStreams::device(Device device) {
  const int index = checked_index(device);
  FSDP_CHECK(index < kMaxDevices, ValueError,
             "{}: device index out of range (this build supports cuda:0 to cuda:{})", device.str(),
             kMaxDevices - 1);
  std::lock_guard lock(devices_mutex_);
  auto& per = devices_[index];
  if (!per) per = std::make_unique<PerDevice>(index);
  return *per;
}

CudaStreams::PerStream& CudaStreams::stream_locked(PerDevice& per, int index, std::uint64_t id) {
  FSDP_CHECK(id <= std::uint64_t(kStreamsPerDevice), ValueError,
             "cuda:{}: no stream {} (new_stream gives ids 1 to {}; 0 is the default stream)", index,
             id, kStreamsPerDevice);
  PerStream& s = per.streams[id];
  if (id != 0 && !s.created) {
    DeviceGuard guard(index);
    // Non-blocking: never serialised behind the legacy default stream's unrelated work; every
    // ordering between streams is an event the caller asked for.
    FSDP_CUDA_CHECK(cudaStreamCreateWithFlags(&s.handle, cudaStreamNonBlocking));
    s.created = true;
  }
  return s;
}

cudaStream_t CudaStreams::native(const Stream& stream) {
  const Device d = stream_device(stream.device);
  PerDevice& per = device(d);
  std::lock_guard lock(per.mutex);
  return stream_locked(per, d.index, stream.id).handle;
}

Stream CudaStreams::new_stream(Device device, int) {
  const Device d = stream_device(device);
  PerDevice& per = this->device(d);
  std::lock_guard lock(per.mutex);
  return Stream{d, 1 + per.next_stream++ % kStreamsPerDevice};
}

void CudaStreams::launch(const Stream& stream, std::function<void()> work) {
  const Device d = stream_device(stream.device);
  PerDevice& per = device(d);
  auto host = std::make_unique<HostWork>();
  host->work = std::move(work);
  host->on_error = [&per, d, id = stream.id](const std::string& what) {
    std::lock_guard lock(per.mutex);
    if (per.error.empty())
      per.error = fmt::format("{}: work queued on stream {} failed: {}", d.str(), id, what);
  };
  cudaStream_t handle = native(stream);
  DeviceGuard guard(d.index);
  FSDP_CUDA_CHECK(cudaLaunchHostFunc(handle, run_host_work, host.get()));
  host.release();  // run_host_work owns it now
}

std::uint64_t CudaStreams::record(const Stream& stream) {
  const Device d = stream_device(stream.device);
  PerDevice& per = device(d);
  cudaEvent_t event = per.events.acquire();
  std::lock_guard lock(per.mutex);
  PerStream& s = stream_locked(per, d.index, stream.id);
  // Events known done leave first, so a stream recorded often keeps few pending.
  while (!s.pending.empty() && per.synchronizing == 0 &&
         cudaEventQuery(s.pending.front().second) == cudaSuccess)
    complete_locked(per, s, s.pending.front().first);
  (void)cudaGetLastError();  // a not-ready query is not an error for the next launch check
  DeviceGuard guard(d.index);
  FSDP_CUDA_CHECK(cudaEventRecord(event, s.handle));
  s.pending.emplace_back(++s.recorded, event);
  stream_sanitizer::on_record_sequence(stream, s.recorded);
  return s.recorded;
}

cudaEvent_t CudaStreams::event_locked(PerStream& s, std::uint64_t sequence, const Stream& stream) {
  FSDP_CHECK(sequence <= s.recorded, ValueError,
             "{}: stream {} has recorded {} events, so it has no event {}",
             stream_device(stream.device).str(), stream.id, s.recorded, sequence);
  // Numbers are recorded in order, so the pending queue is sorted.
  auto it = std::lower_bound(s.pending.begin(), s.pending.end(), sequence,
                             [](const auto& p, std::uint64_t n) { return p.first < n; });
  return it != s.pending.end() && it->first == sequence ? it->second : nullptr;
}

void CudaStreams::complete_locked(PerDevice& per, PerStream& s, std::uint64_t sequence) {
  s.completed = std::max(s.completed, sequence);
  if (per.synchronizing > 0) return;  // a host wait may still name one of these events
  while (!s.pending.empty() && s.pending.front().first <= s.completed) {
    per.events.release(s.pending.front().second);
    s.pending.pop_front();
  }
}

bool CudaStreams::query(const Stream& stream, std::uint64_t sequence) {
  const Device d = stream_device(stream.device);
  PerDevice& per = device(d);
  std::lock_guard lock(per.mutex);
  PerStream& s = stream_locked(per, d.index, stream.id);
  if (sequence <= s.completed) return true;
  cudaEvent_t e = event_locked(s, sequence, stream);
  if (!e) return true;  // released: a later event was seen done
  const cudaError_t rc = cudaEventQuery(e);
  if (rc == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  FSDP_CUDA_CHECK(rc);
  complete_locked(per, s, sequence);
  return true;
}

void CudaStreams::synchronize(const Stream& stream, std::uint64_t sequence) {
  const Device d = stream_device(stream.device);
  PerDevice& per = device(d);
  stream_sanitizer::on_synchronize_sequence(stream, sequence);
  cudaEvent_t e = nullptr;
  {
    std::lock_guard lock(per.mutex);
    PerStream& s = stream_locked(per, d.index, stream.id);
    if (sequence > s.completed) e = event_locked(s, sequence, stream);
    if (e) ++per.synchronizing;
  }
  if (e) {
    // Not under the lock: other threads record and launch while this one waits.
    const cudaError_t rc = cudaEventSynchronize(e);
    std::lock_guard lock(per.mutex);
    --per.synchronizing;
    FSDP_CUDA_CHECK(rc);
    complete_locked(per, per.streams[stream.id], sequence);
  }
  throw_pending_error(per);
}

void CudaStreams::wait(const Stream& waiter, const Stream& stream, std::uint64_t sequence) {
  const Device d = stream_device(stream.device), w = stream_device(waiter.device);
  PerDevice& per = device(d);
  cudaStream_t waiting = native(waiter);
  // Told even when the event is known done: the ordering holds either way.
  stream_sanitizer::on_wait_sequence(waiter, stream, sequence);
  std::lock_guard lock(per.mutex);
  PerStream& s = stream_locked(per, d.index, stream.id);
  if (sequence <= s.completed) return;
  cudaEvent_t e = event_locked(s, sequence, stream);
  if (!e) return;
  // The wait is queued on the waiter's device, and captures the event's record now, so the
  // event may go back to the pool afterwards.
  DeviceGuard guard(w.index);
  FSDP_CUDA_CHECK(cudaStreamWaitEvent(waiting, e, 0));
}

void CudaStreams::synchronize_device(Device device) {
  const Device d = stream_device(device);
  PerDevice& per = this->device(d);
  {
    DeviceGuard guard(d.index);
    FSDP_CUDA_CHECK(cudaDeviceSynchronize());
  }
  {
    std::lock_guard lock(per.mutex);
    for (PerStream& s : per.streams) complete_locked(per, s, s.recorded);
  }
  stream_sanitizer::on_synchronize_device(d);
  throw_pending_error(per);  // takes the lock itself
}

void CudaStreams::throw_pending_error(PerDevice& per) {
  std::string error;
  {
    std::lock_guard lock(per.mutex);
    error.swap(per.error);
  }
  if (!error.empty()) throw RuntimeError(error);
  raise_index_fault(per.index);
}

}  // namespace fsdp::cuda
