// CUDA events kept for reuse, per device: a stream backend records one at every Event::record
// (FSDP records several per unit and step), and creating an event is a driver call that can
// synchronise, so finished events go back to the pool instead of being destroyed. Timing is off
// (a timing event costs a timestamp on every record) unless the pool is made for timing events
// (core/stream_timing.h's marks, timing_marks.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <mutex>
#include <vector>

namespace fsdp::cuda {

class EventPool {
 public:
  explicit EventPool(int device, bool timing = false) : device_(device), timing_(timing) {}
  ~EventPool();  // destroys the events it holds
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  cudaEvent_t acquire();            // a pooled event, or a new one on the pool's device
  void release(cudaEvent_t event);  // back to the pool; its last record may still be pending
  std::size_t pooled() const;

 private:
  int device_;
  bool timing_;
  mutable std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
};

}  // namespace fsdp::cuda
