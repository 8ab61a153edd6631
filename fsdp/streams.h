// FSDP's stream protocol on an accelerator, as upstream FSDP1 runs it on GPUs
// (_runtime_utils._init_streams, _limiter_utils): per root, an unshard stream for the
// all-gathers, a post-backward stream for the gradient reductions and a pre-unshard stream for
// the mixed-precision casts, beside the compute stream (the current one). The compute stream
// waits for an all-gather before using its parameters; the post-backward stream waits for the
// compute stream before reading a gradient, which is record_stream'ed there; the free-event queue
// keeps at most two units' unsharded parameters alive on the device (limit_all_gathers); the
// final callback makes the compute stream wait for the post-backward stream. On the cpu every
// stream is the cpu's one stream and the runtime keeps its host-side queues (comm_scheduler.h).
#pragma once

#include <cstddef>
#include <deque>
#include <optional>

#include "core/device.h"
#include "core/stream.h"

namespace fsdp {

struct RootStreams {
  Device device;         // the flat parameters' device (set by for_device)
  Stream unshard;        // all-gathers
  Stream post_backward;  // reduce-scatters (all-reduces for NO_SHARD, HYBRID's replica step)
  Stream pre_unshard;    // mixed-precision casts of the shards before their all-gather

  // Fresh streams of `device` for an accelerator (upstream gives the unshard and post-backward
  // streams high priority); the cpu's one stream otherwise.
  static RootStreams for_device(Device device);
  bool on_accelerator() const { return device.is_accelerator(); }
  Stream compute() const { return current_stream(device); }
  // The unshard and pre-unshard streams wait for the compute stream's work so far: the shards
  // they read were written there (the optimizer). Upstream's _wait_for_computation_stream.
  void wait_for_compute() const;
};

// Upstream's _FreeEventQueue: an event recorded on the compute stream at each reshard that
// freed unsharded parameters. Before the next all-gather, when `max_in_flight` events are
// queued, the oldest is returned for the host to synchronise: the device then holds at most that
// many units' unsharded parameters that are freed on the host but still in use on the device.
class FreeEventQueue {
 public:
  explicit FreeEventQueue(std::size_t max_in_flight = 2) : max_in_flight_(max_in_flight) {}
  void enqueue(const Event& free_event) { queue_.push_back(free_event); }
  std::optional<Event> dequeue_if_needed();
  std::size_t size() const { return queue_.size(); }

 private:
  std::size_t max_in_flight_;
  std::deque<Event> queue_;
};

}  // namespace fsdp
