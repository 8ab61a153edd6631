#include "comm/work.h"

#include <thread>

namespace fsdp::comm {

void Work::block_stream(const Stream& stream) {
  if (stream.device.is_accelerator()) wait();
}

bool StreamWork::wait_for(std::chrono::milliseconds timeout) {
  // Events have no timed wait (nor has cudaEvent): poll, as torch's NCCL watchdog does.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done_.query()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  done_.synchronize();  // rethrows a failure of the queued collective
  return true;
}

bool StreamWork::test() {
  if (!done_.query()) return false;
  done_.synchronize();
  return true;
}

void PromiseWork::rethrow_locked() const {
  if (error_) std::rethrow_exception(error_);
}

void PromiseWork::wait() {
  std::unique_lock lock(mutex_);
  done_cv_.wait(lock, [&] { return done_; });
  rethrow_locked();
}

bool PromiseWork::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!done_cv_.wait_for(lock, timeout, [&] { return done_; })) return false;
  rethrow_locked();
  return true;
}

bool PromiseWork::test() {
  std::lock_guard lock(mutex_);
  if (!done_) return false;
  rethrow_locked();
  return true;
}

void PromiseWork::set_done() {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
  }
  done_cv_.notify_all();
}

void PromiseWork::set_error(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    error_ = std::move(error);
    done_ = true;
  }
  done_cv_.notify_all();
}

std::shared_ptr<Work> completed_work() {
  auto work = std::make_shared<PromiseWork>();
  work->set_done();
  return work;
}

}  // namespace fsdp::comm
