// Work: the handle of an asynchronous collective (the host's wait, and a stream's: block_stream).
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>

#include "core/stream.h"

namespace fsdp::comm {

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective finished; rethrows its error.
  virtual void wait() = 0;
  // Waits at most `timeout`; true when finished (rethrows its error), false when still running.
  virtual bool wait_for(std::chrono::milliseconds timeout) = 0;
  // True when finished (rethrows its error); never blocks.
  virtual bool test() = 0;
  // The device-side wait: work queued on `stream` from now runs after the collective (torch's
  // Work.wait() on an NCCL group). A collective the host ran has nothing to order on the cpu
  // (its caller waits with wait()); an accelerator's stream is ordered by waiting here.
  virtual void block_stream(const Stream& stream);
};

// A Work completed by whoever runs the collective (a worker thread, a backend's progress loop).
class PromiseWork final : public Work {
 public:
  void wait() override;
  bool wait_for(std::chrono::milliseconds timeout) override;
  bool test() override;

  void set_done();
  void set_error(std::exception_ptr error);

 private:
  void rethrow_locked() const;

  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

// A collective queued on an accelerator stream: finished when the stream reaches `done`, the
// event recorded right after it.
class StreamWork final : public Work {
 public:
  explicit StreamWork(Event done) : done_(done) {}
  void wait() override { done_.synchronize(); }
  bool wait_for(std::chrono::milliseconds timeout) override;
  bool test() override;
  void block_stream(const Stream& stream) override { stream.wait_event(done_); }
  const Event& done() const { return done_; }

 private:
  Event done_;
};

// A Work that finished when it was created (synchronous backends, size-1 groups).
std::shared_ptr<Work> completed_work();

}  // namespace fsdp::comm
