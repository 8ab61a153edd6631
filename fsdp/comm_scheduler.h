// The runtime's collectives, issued asynchronously on two ordered queues per process group (one
// for all-gathers, one for gradient reductions, each a group of the same ranks), so that a
// reduce-scatter never delays the next prefetch all-gather. Reductions in flight keep their
// buffers alive until they are finished; the time the rank's thread spends blocked waiting for a
// collective is counted (the "exposed communication" of the benchmarks). On an accelerator the
// reductions finish on the post-backward stream instead (fsdp/streams.h), and streams wait for
// collectives on the device: there the exposed communication is the streams' stalls, timed on the
// device (core/stream_timing.h).
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "comm/process_group.h"
#include "core/stream.h"
#include "core/stream_timing.h"
#include "core/tensor.h"
#include "fsdp/events.h"

namespace fsdp {

class FlatParamHandle;

// One gradient reduction in flight: reduce-scatter (or all-reduce for NO_SHARD) of `input`
// into `output`, then an all-reduce over `replicate` (HYBRID_SHARD), then the post-division, then
// accumulation into the handle's gradient.
struct PendingReduction {
  FlatParamHandle* handle = nullptr;
  std::string unit;  // the unit's FQN, for error messages
  std::shared_ptr<comm::Work> work;
  Tensor input;   // kept alive until the collective finished
  Tensor output;  // [shard_numel] (the unsharded gradient itself for NO_SHARD)
  comm::ProcessGroup* replicate = nullptr;
  double postdivide = 1.0;
};

class CommScheduler {
 public:
  CommBytes bytes;  // counted by the runtime as it issues the collectives

  // The all-gather queue and the reduction queue of `group` (made on first use: every rank of
  // the group must ask for them in the same order, as for any new_group).
  comm::ProcessGroup& all_gather_queue(const std::shared_ptr<comm::ProcessGroup>& group);
  comm::ProcessGroup& reduce_queue(const std::shared_ptr<comm::ProcessGroup>& group);

  // Accelerators: reductions finish on this stream (their collectives were queued there), with
  // no host wait (fsdp/streams.h). Unset on the cpu: the host waits for each.
  void set_post_backward_stream(const Stream& stream) { post_backward_ = stream; }

  void enqueue(PendingReduction r);
  // Finishes reductions, oldest first, until at most `max_in_flight` remain (by count: the same
  // on every rank).
  void finish_reductions(std::size_t max_in_flight);
  std::size_t reductions_in_flight() const { return pending_.size(); }

  // Exposed communication since construction or the last reset, in seconds: the time the
  // caller was blocked in collectives (the host's waits), plus, on an accelerator, the time a
  // stream stalled on the device waiting for a collective (stream_wait's). Reading it waits for
  // the stalls' marks still pending.
  double blocked_seconds();
  void reset_blocked_seconds();
  // Waits for `work`, counting the time blocked.
  void wait(comm::Work& work);
  // Work queued on `waiter` from now waits for `work` (or for `other`'s work so far), device-side
  // with no host wait; timing marks on `waiter` either side of the wait measure its stall (the
  // second mark is reached when both the waiter's earlier work and the collective are done).
  void stream_wait(comm::Work& work, const Stream& waiter);
  void stream_wait(const Stream& other, const Stream& waiter);

 private:
  struct Queues {
    std::shared_ptr<comm::ProcessGroup> all_gather;
    std::shared_ptr<comm::ProcessGroup> reduce;
  };
  Queues& queues(const std::shared_ptr<comm::ProcessGroup>& group);
  void finish_front();
  // Marks `waiter` before and after `wait_on` makes it wait.
  template <typename WaitOn>
  void timed_stream_wait(const Stream& waiter, WaitOn wait_on);
  // Adds the stalls whose marks the devices reached (all of them, waiting, when `wait`).
  void collect_stalls(bool wait);
  std::map<comm::ProcessGroup*, Queues> queues_;
  std::deque<PendingReduction> pending_;
  double blocked_seconds_ = 0;
  struct Stall {
    std::unique_ptr<TimingMark> before, after;
  };
  std::deque<Stall> stalls_;  // oldest first
  std::optional<Stream> post_backward_;
};

}  // namespace fsdp
