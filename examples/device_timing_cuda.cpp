// device_timing.h with CUDA: timing events (core/cuda/runtime.h) recorded on the device's current
// stream, as torch.cuda.Event(enable_timing=True) and llm.c time a step.
#include <cuda_runtime_api.h>

#include "core/cuda/devices.h"
#include "core/cuda/runtime.h"
#include "core/native_stream.h"
#include "core/stream.h"
#include "examples/device_timing.h"

namespace fsdp::examples {

namespace {

class CudaInterval final : public DeviceInterval {
 public:
  explicit CudaInterval(Device device) : device_(device), index_(cuda::checked_index(device)) {
    cuda::DeviceGuard guard(index_);  // events belong to the device current when made
    start_ = std::make_unique<cuda::Event>(/*timing=*/true);
    end_ = std::make_unique<cuda::Event>(/*timing=*/true);
  }
  void start() override { record(*start_); }
  double stop_seconds() override {
    record(*end_);
    end_->synchronize();
    return start_->elapsed_ms(*end_) / 1000.0;
  }

 private:
  void record(cuda::Event& event) {
    cuda::DeviceGuard guard(index_);
    event.record(static_cast<cudaStream_t>(native_stream(current_stream(device_))));
  }

  Device device_;
  int index_;
  std::unique_ptr<cuda::Event> start_, end_;
};

}  // namespace

std::unique_ptr<DeviceInterval> device_interval(Device device) {
  if (!device.is_cuda()) return nullptr;
  return std::make_unique<CudaInterval>(device);
}

std::string device_name(Device device) {
  if (!device.is_cuda()) return "";
  return cuda::device_properties(cuda::checked_index(device)).name;
}

}  // namespace fsdp::examples
