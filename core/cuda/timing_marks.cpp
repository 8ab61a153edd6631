// core/stream_timing.h on CUDA: a timing event recorded on the stream, so that a mark's time is
// the device's, taken when the stream reaches it, with no host function in the stream's way.
#include "core/cuda/timing_marks.h"

#include <cuda_runtime_api.h>

#include <array>
#include <memory>
#include <mutex>

#include "core/cuda/cuda_check.h"
#include "core/cuda/devices.h"
#include "core/cuda/event_pool.h"
#include "core/cuda/streams.h"
#include "core/error.h"

namespace fsdp::cuda {

namespace {

// Timing events kept for reuse per device: FSDP marks two a collective wait, and creating an
// event is a driver call that can synchronise (event_pool.h).
EventPool& timing_events(int index) {
  static std::array<std::unique_ptr<EventPool>, CudaStreams::kMaxDevices> pools;
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  auto& pool = pools.at(static_cast<std::size_t>(index));
  if (!pool) pool = std::make_unique<EventPool>(index, /*timing=*/true);
  return *pool;
}

class CudaTimingMark final : public TimingMark {
 public:
  explicit CudaTimingMark(const Stream& stream)
      : index_(checked_index(stream.device)), event_(timing_events(index_).acquire()) {
    cudaStream_t native = streams().native(stream);
    DeviceGuard guard(index_);
    FSDP_CUDA_CHECK(cudaEventRecord(event_, native));
  }
  // Back to the pool: a later record replaces this one (event_pool.h).
  ~CudaTimingMark() override { timing_events(index_).release(event_); }
  CudaTimingMark(const CudaTimingMark&) = delete;
  CudaTimingMark& operator=(const CudaTimingMark&) = delete;

  bool done() override {
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();  // not ready is no error for the next launch check
      return false;
    }
    FSDP_CUDA_CHECK(status);
    return true;
  }
  void wait() override {
    if (!done()) FSDP_CUDA_CHECK(cudaEventSynchronize(event_));
  }
  double seconds_since(TimingMark& earlier) override {
    auto* e = dynamic_cast<CudaTimingMark*>(&earlier);
    FSDP_CHECK(e != nullptr && e->index_ == index_, ValueError,
               "timing marks: seconds_since needs an earlier mark of cuda:{}", index_);
    e->wait();
    wait();
    float ms = 0;
    FSDP_CUDA_CHECK(cudaEventElapsedTime(&ms, e->event_, event_));
    return ms / 1000.0;
  }

 private:
  int index_;
  cudaEvent_t event_;
};

}  // namespace

std::unique_ptr<TimingMark> timing_mark(const Stream& stream) {
  return std::make_unique<CudaTimingMark>(stream);
}

}  // namespace fsdp::cuda
