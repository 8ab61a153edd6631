#include "fsdp/streams.h"

namespace fsdp {

RootStreams RootStreams::for_device(Device device) {
  RootStreams s;
  s.device = stream_device(device);
  if (!device.is_accelerator()) {
    s.unshard = s.post_backward = s.pre_unshard = current_stream(s.device);
    return s;
  }
  // torch.cuda's priorities: lower runs first. The all-gathers and reductions gate compute.
  s.unshard = new_stream(s.device, -1);
  s.post_backward = new_stream(s.device, -1);
  s.pre_unshard = new_stream(s.device, 0);
  return s;
}

void RootStreams::wait_for_compute() const {
  if (!on_accelerator()) return;
  const Stream c = compute();
  unshard.wait_stream(c);
  pre_unshard.wait_stream(c);
}

std::optional<Event> FreeEventQueue::dequeue_if_needed() {
  if (queue_.size() < max_in_flight_ || queue_.empty()) return std::nullopt;
  Event oldest = queue_.front();
  queue_.pop_front();
  return oldest;
}

}  // namespace fsdp
