// A gate a test opens to release work it queued on a stream: `launch(s, gate.waiter())` holds
// stream s until `gate.open()`, so which stream runs first is the test's choice, not the
// scheduler's (the fake_cuda, stream and FSDP stream tests).
#pragma once

#include <future>

namespace fsdp::testing {

class Gate {
 public:
  void open() { promise_.set_value(); }
  auto waiter() const {
    return [f = future_] { f.wait(); };
  }

 private:
  std::promise<void> promise_;
  std::shared_future<void> future_ = promise_.get_future().share();
};

}  // namespace fsdp::testing
