// The runtime's collectives, issued asynchronously on two ordered queues per process group (one
// for all-gathers, one for gradient reductions, each a group of the same ranks), so that a
// reduce-scatter never delays the next prefetch all-gather. Reductions in flight keep their
// buffers alive until they are finished; the time the rank's thread spends blocked waiting for a
// collective is counted (the "exposed communication" of the benchmarks). On an accelerator the
// reductions finish on the post-backward stream instead (fsdp/streams.h).
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "comm/process_group.h"
#include "core/stream.h"
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

  // Seconds the caller was blocked in collectives, since construction or the last reset.
  double blocked_seconds() const { return blocked_seconds_; }
  void reset_blocked_seconds() { blocked_seconds_ = 0; }
  // Waits for `work`, counting the time blocked.
  void wait(comm::Work& work);

 private:
  struct Queues {
    std::shared_ptr<comm::ProcessGroup> all_gather;
    std::shared_ptr<comm::ProcessGroup> reduce;
  };
  Queues& queues(const std::shared_ptr<comm::ProcessGroup>& group);
  void finish_front();
  std::map<comm::ProcessGroup*, Queues> queues_;
  std::deque<PendingReduction> pending_;
  double blocked_seconds_ = 0;
  std::optional<Stream> post_backward_;
};

}  // namespace fsdp
