#include "comm/ordered_executor.h"

namespace fsdp::comm {

OrderedExecutor::~OrderedExecutor() {
  stop();
}

void OrderedExecutor::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

std::shared_ptr<Work> OrderedExecutor::submit(std::function<void()> task) {
  auto work = std::make_shared<PromiseWork>();
  {
    std::lock_guard lock(mutex_);
    if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
    queue_.push_back(Task{std::move(task), work, MemoryScopes::current()});
  }
  cv_.notify_all();
  return work;
}

void OrderedExecutor::run_inline(const std::function<void()>& task) {
  {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
    busy_ = true;
  }
  struct Release {
    OrderedExecutor* self;
    ~Release() {
      {
        std::lock_guard lock(self->mutex_);
        self->busy_ = false;
      }
      self->cv_.notify_all();
    }
  } release{this};
  task();
}

void OrderedExecutor::worker_loop() {
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return (!queue_.empty() && !busy_) || (stopping_ && queue_.empty()); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    try {
      MemoryScopesGuard scopes(std::move(task.scopes));
      task.fn();
      task.work->set_done();
    } catch (...) {
      task.work->set_error(std::current_exception());
    }
    {
      std::lock_guard lock(mutex_);
      busy_ = false;
    }
    cv_.notify_all();
  }
}

}  // namespace fsdp::comm
