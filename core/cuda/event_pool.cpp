#include "core/cuda/event_pool.h"

#include "core/cuda/cuda_check.h"
#include "core/cuda/devices.h"

namespace fsdp::cuda {

EventPool::~EventPool() {
  for (cudaEvent_t e : free_) cudaEventDestroy(e);  // no throw from a destructor
}

cudaEvent_t EventPool::acquire() {
  {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
  }
  DeviceGuard guard(device_);
  cudaEvent_t e = nullptr;
  FSDP_CUDA_CHECK(
      cudaEventCreateWithFlags(&e, timing_ ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}

void EventPool::release(cudaEvent_t event) {
  // A re-record replaces the event's pending work, and a cudaStreamWaitEvent already queued
  // captured the earlier record: reuse is safe as soon as no one will ask about this record.
  std::lock_guard lock(mutex_);
  free_.push_back(event);
}

std::size_t EventPool::pooled() const {
  std::lock_guard lock(mutex_);
  return free_.size();
}

}  // namespace fsdp::cuda
