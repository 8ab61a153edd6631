#include "core/cuda/runtime.h"

#include "core/cuda/cuda_check.h"

namespace fsdp::cuda {

int device_count(std::string* why) {
  int n = 0;
  cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    if (why) *why = cudaGetErrorString(rc);
    (void)cudaGetLastError();  // a missing driver must not poison the next call
    return 0;
  }
  if (n == 0 && why) *why = "0 devices";
  return n;
}

DeviceProperties device_properties(int device) {
  cudaDeviceProp p{};
  FSDP_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  DeviceProperties d;
  d.name = p.name;
  d.major = p.major;
  d.minor = p.minor;
  d.multiprocessors = p.multiProcessorCount;
  d.total_memory = p.totalGlobalMem;
  d.l2_bytes = static_cast<std::size_t>(p.l2CacheSize);
  d.shared_per_block_optin = p.sharedMemPerBlockOptin;
  d.max_grid_y = p.maxGridSize[1];
  return d;
}

Stream::Stream() {
  FSDP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}
Stream::~Stream() {
  cudaStreamDestroy(stream_);  // no throw from a destructor; a bad handle cannot happen here
}
void Stream::synchronize() const {
  FSDP_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

Event::Event(bool timing) {
  FSDP_CUDA_CHECK(
      cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
Event::~Event() {
  cudaEventDestroy(event_);
}
void Event::record(cudaStream_t stream) {
  FSDP_CUDA_CHECK(cudaEventRecord(event_, stream));
}
void Event::wait_on(cudaStream_t stream) const {
  FSDP_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
}
bool Event::query() const {
  cudaError_t rc = cudaEventQuery(event_);
  if (rc == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  FSDP_CUDA_CHECK(rc);
  return true;
}
void Event::synchronize() const {
  FSDP_CUDA_CHECK(cudaEventSynchronize(event_));
}
float Event::elapsed_ms(const Event& end) const {
  float ms = 0;
  FSDP_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_));
  return ms;
}

PinnedBuffer::PinnedBuffer(std::size_t bytes) : bytes_(bytes) {
  FSDP_CUDA_CHECK(cudaMallocHost(&ptr_, bytes ? bytes : 1));
}
PinnedBuffer::~PinnedBuffer() {
  cudaFreeHost(ptr_);
}

}  // namespace fsdp::cuda
