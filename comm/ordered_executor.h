// Internal: runs a group's collectives one at a time in issue order, on the caller's thread
// (synchronous calls) or on one worker thread (asynchronous calls). Ranks must issue collectives
// in the same order, so one FIFO per group is what keeps asynchronous calls matched across ranks.
// A queued task runs under the memory-statistics scopes of the thread that queued it, so what it
// allocates is charged to that rank.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/work.h"
#include "core/memory_stats.h"

namespace fsdp::comm {

class OrderedExecutor {
 public:
  OrderedExecutor() = default;
  ~OrderedExecutor();  // finishes queued tasks, then joins the worker
  OrderedExecutor(const OrderedExecutor&) = delete;
  OrderedExecutor& operator=(const OrderedExecutor&) = delete;

  // Queues task; the returned work completes (or carries the task's exception) when it ran.
  std::shared_ptr<Work> submit(std::function<void()> task);
  // Waits for every queued task, then runs task on the calling thread.
  void run_inline(const std::function<void()>& task);
  void stop();

 private:
  struct Task {
    std::function<void()> fn;
    std::shared_ptr<PromiseWork> work;
    MemoryScopes scopes;  // the queuing thread's
  };
  void worker_loop();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace fsdp::comm
