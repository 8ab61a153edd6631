// CUDA's path of the threads backend on fake_cuda, for tests: while a QueuedLikeCuda lives,
// fake_cuda's copy functions have no launched_address and a reduce queued on the stream, so the
// threads backend runs the protocol it runs on CUDA buffers (the host's rendezvous, events
// between the ranks' streams, device-to-device copies and the device's reduce on the stream)
// with fake_cuda's streams, memory and sanitizer. One at a time, on the main thread.
#pragma once

#include <vector>

#include "comm/reduce_kernels.h"
#include "core/device_copy.h"
#include "core/stream.h"

namespace fsdp::testing {

class QueuedLikeCuda {
 public:
  QueuedLikeCuda() : real_(&device_copy(Device(DeviceType::FakeCUDA, 0))) {
    real() = real_;
    queued_ = *real_;
    queued_.launched_address = nullptr;
    queued_.reduce = reduce;
    register_device_copy(DeviceType::FakeCUDA, &queued_);
  }
  ~QueuedLikeCuda() { register_device_copy(DeviceType::FakeCUDA, real_); }
  // Where launched work reaches `ptr` (the test's own kernels; the backend is not told).
  static void* host_view(const void* ptr) { return real()->launched_address(ptr); }

 private:
  static const DeviceCopyFunctions*& real() {
    static const DeviceCopyFunctions* functions = nullptr;
    return functions;
  }
  // comm's reduction on the buffers' host views, as a kernel queued on the stream.
  static void reduce(void* dst, const void* const* srcs, int n, std::size_t count, DType dtype,
                     DeviceReduceOp op, int divisor, const Stream& stream) {
    void* out = real()->launched_address(dst);
    std::vector<const void*> in(static_cast<std::size_t>(n));
    for (int k = 0; k < n; ++k) in[std::size_t(k)] = real()->launched_address(srcs[k]);
    launch(stream, [=] {
      comm::reduce_buffers(static_cast<comm::ReduceOp>(op), dtype, out, in.data(), n, count,
                           divisor);
    });
  }
  const DeviceCopyFunctions* real_;
  DeviceCopyFunctions queued_;
};

}  // namespace fsdp::testing
