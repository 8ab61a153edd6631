// The CUDA runtime as values: streams and events that own their handles, the properties the
// kernels size themselves by, and pinned host buffers (copies from pageable memory are staged
// and synchronous; pinned ones are asynchronous DMA).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace fsdp::cuda {

// Number of usable CUDA devices; 0 (and `why` says why) where there is no driver or device, so a
// test can skip instead of failing.
int device_count(std::string* why = nullptr);

struct DeviceProperties {
  std::string name;
  int major = 0, minor = 0;
  int multiprocessors = 0;
  std::size_t total_memory = 0;
  std::size_t l2_bytes = 0;
  std::size_t shared_per_block_optin = 0;  // the most a kernel may ask after cudaFuncSetAttribute
  int max_grid_y = 0;
};
DeviceProperties device_properties(int device);

// A non-blocking stream: it does not synchronise with the legacy default stream, so work the
// caller orders by events cannot be serialised behind unrelated default-stream work.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

// An event without timing unless asked: timing events cost a timestamp on every record.
class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(cudaStream_t stream);
  void wait_on(cudaStream_t stream) const;  // `stream` waits for this event's work, device-side
  bool query() const;                       // has the recorded work finished?
  void synchronize() const;
  float elapsed_ms(const Event& end) const;  // both timing events, both recorded and finished
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// Page-locked host memory for asynchronous copies (and CPU offload).
class PinnedBuffer {
 public:
  explicit PinnedBuffer(std::size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* data() const { return ptr_; }
  std::size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace fsdp::cuda
