// Work: the handle of an asynchronous collective.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>

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

// A Work that finished when it was created (synchronous backends, size-1 groups).
std::shared_ptr<Work> completed_work();

}  // namespace fsdp::comm
