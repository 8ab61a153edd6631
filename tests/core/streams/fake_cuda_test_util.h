// Helpers of the fake_cuda tests: a gate a test opens to release work it queued (so that which
// stream runs first is the test's choice, not the scheduler's), and ints in device memory.
#pragma once

#include <future>
#include <memory>

#include "core/device_copy.h"
#include "core/fake_cuda/fake_cuda.h"
#include "core/memory.h"

namespace fsdp::testing {

inline const Device kFake0(DeviceType::FakeCUDA, 0);

class Gate {
 public:
  void open() { promise_.set_value(); }
  // Work for a stream that blocks it until the gate opens.
  auto waiter() const {
    return [f = future_] { f.wait(); };
  }

 private:
  std::promise<void> promise_;
  std::shared_future<void> future_ = promise_.get_future().share();
};

// One int in device memory of `device`, on the current stream.
inline std::unique_ptr<Storage> device_int(int value, Device device = kFake0) {
  auto s = std::make_unique<Storage>(sizeof(int), device);
  copy_bytes(s->data(), device, &value, kCPU, sizeof(int));
  return s;
}

// Reads it back (the copy to the host synchronises the current stream first).
inline int read_int(const Storage& s) {
  int v = -1;
  copy_bytes(&v, kCPU, s.data(), s.device(), sizeof(int));
  return v;
}

inline int* view(const Storage& s) {
  return static_cast<int*>(fake_cuda::host_view(s.data()));
}

}  // namespace fsdp::testing
