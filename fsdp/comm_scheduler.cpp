#include "fsdp/comm_scheduler.h"

#include <fmt/format.h>

#include <chrono>
#include <numeric>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"
#include "fsdp/flat_param.h"

namespace fsdp {

CommScheduler::Queues& CommScheduler::queues(const std::shared_ptr<comm::ProcessGroup>& group) {
  auto it = queues_.find(group.get());
  if (it != queues_.end()) return it->second;
  Queues q;
  if (group->size() == 1) {
    q.all_gather = q.reduce = group;  // nothing to overlap
  } else {
    std::vector<int> ranks(static_cast<std::size_t>(group->size()));
    std::iota(ranks.begin(), ranks.end(), 0);
    q.all_gather = group->new_group(ranks);
    q.reduce = group->new_group(ranks);
  }
  return queues_.emplace(group.get(), std::move(q)).first->second;
}

comm::ProcessGroup& CommScheduler::all_gather_queue(
    const std::shared_ptr<comm::ProcessGroup>& group) {
  return *queues(group).all_gather;
}

comm::ProcessGroup& CommScheduler::reduce_queue(const std::shared_ptr<comm::ProcessGroup>& group) {
  return *queues(group).reduce;
}

void CommScheduler::wait(comm::Work& work) {
  if (work.test()) return;
  const auto t0 = std::chrono::steady_clock::now();
  work.wait();
  blocked_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <typename WaitOn>
void CommScheduler::timed_stream_wait(const Stream& waiter, WaitOn wait_on) {
  std::unique_ptr<TimingMark> before = timing_mark(waiter);
  wait_on();
  stalls_.push_back({std::move(before), timing_mark(waiter)});
  collect_stalls(/*wait=*/false);  // keeps the marks few over a long run
}

void CommScheduler::stream_wait(comm::Work& work, const Stream& waiter) {
  timed_stream_wait(waiter, [&] { work.block_stream(waiter); });
}

void CommScheduler::stream_wait(const Stream& other, const Stream& waiter) {
  timed_stream_wait(waiter, [&] { waiter.wait_stream(other); });
}

void CommScheduler::collect_stalls(bool wait) {
  while (!stalls_.empty() && (wait || stalls_.front().after->done())) {
    Stall& s = stalls_.front();
    blocked_seconds_ += s.after->seconds_since(*s.before);
    stalls_.pop_front();
  }
}

double CommScheduler::blocked_seconds() {
  // One host wait, for the newest mark: the waiting streams' earlier marks are then done too.
  if (!stalls_.empty()) stalls_.back().after->wait();
  collect_stalls(/*wait=*/true);
  return blocked_seconds_;
}

void CommScheduler::reset_blocked_seconds() {
  // Stalls queued before the reset belong to the period before it, wherever the devices are.
  stalls_.clear();
  blocked_seconds_ = 0;
}

void CommScheduler::enqueue(PendingReduction r) {
  pending_.push_back(std::move(r));
}

void CommScheduler::finish_front() {
  PendingReduction r = std::move(pending_.front());
  pending_.pop_front();
  autograd::NoGradGuard no_grad;
  std::optional<StreamGuard> on_stream;
  if (post_backward_) on_stream.emplace(*post_backward_);
  try {
    if (r.work && post_backward_)
      r.work->block_stream(*post_backward_);
    else if (r.work)
      wait(*r.work);
    if (r.replicate != nullptr && r.replicate->size() > 1) {
      const auto t0 = std::chrono::steady_clock::now();
      r.replicate->all_reduce(r.output.data_ptr(), static_cast<std::size_t>(r.output.numel()),
                              r.output.dtype(), comm::ReduceOp::Sum, r.output.device());
      blocked_seconds_ +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  } catch (const std::exception& e) {
    throw RuntimeError(
        fmt::format("FSDP unit '{}': reduction of its gradient failed: {}", r.unit, e.what()));
  }
  if (r.postdivide != 1.0) mul_(r.output, 1.0 / r.postdivide);
  r.handle->accumulate_reduced_grad(r.output);
}

void CommScheduler::finish_reductions(std::size_t max_in_flight) {
  // By count only, never by "is it done yet": finishing may run a collective (HYBRID's
  // all-reduce), so every rank must finish the same reductions at the same point.
  while (pending_.size() > max_in_flight) finish_front();
}

}  // namespace fsdp
