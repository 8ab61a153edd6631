#include "core/cuda/cuda_memory_backend.h"

#include <cuda_runtime_api.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/devices.h"

namespace fsdp::cuda {
namespace {

class CudaMemoryBackend final : public DeviceMemoryBackend {
 public:
  explicit CudaMemoryBackend(int device) : device_(device) {}
  void* allocate(std::size_t bytes) override {
    DeviceGuard guard(device_);
    void* p = nullptr;
    cudaError_t rc = cudaMalloc(&p, bytes);
    if (rc == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // out of memory is the allocator's to handle: not sticky
      return nullptr;
    }
    FSDP_CUDA_CHECK(rc);
    return p;
  }
  void release(void* ptr) override {
    DeviceGuard guard(device_);
    FSDP_CUDA_CHECK(cudaFree(ptr));
  }
  EventId record_event(StreamId stream) override {
    DeviceGuard guard(device_);
    cudaEvent_t e = nullptr;
    FSDP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    FSDP_CUDA_CHECK(cudaEventRecord(e, reinterpret_cast<cudaStream_t>(stream)));
    return reinterpret_cast<EventId>(e);
  }
  bool event_done(EventId event) override {
    cudaError_t rc = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
    if (rc == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    FSDP_CUDA_CHECK(rc);
    return true;
  }
  void synchronize_event(EventId event) override {
    FSDP_CUDA_CHECK(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(event)));
  }
  void destroy_event(EventId event) override {
    FSDP_CUDA_CHECK(cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event)));
  }

 private:
  int device_;
};

}  // namespace

std::unique_ptr<DeviceMemoryBackend> make_cuda_memory_backend(int device) {
  return std::make_unique<CudaMemoryBackend>(device);
}

}  // namespace fsdp::cuda
