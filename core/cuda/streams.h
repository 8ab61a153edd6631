// CUDA's StreamBackend (core/stream.h) over cudaStream_t and cudaEvent_t. Stream id 0 is the
// device's default stream (the legacy null stream, torch's default); ids 1 to 32 are torch's
// pool of non-blocking streams, created at first use and handed out round robin. A work item
// number is an event: record() records a pooled event and numbers it, so (stream, number) is a
// point in that stream's work that query, synchronize and a cudaStreamWaitEvent can name.
// Kernels are launched straight onto native(stream) by the kernel table; launch() is for host
// code that must run in stream order (cudaLaunchHostFunc: it may not call CUDA itself).
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "core/cuda/event_pool.h"
#include "core/stream.h"

namespace fsdp::cuda {

class CudaStreams final : public StreamBackend {
 public:
  static constexpr int kStreamsPerDevice = 32;
  static constexpr int kMaxDevices = 16;

  Stream new_stream(Device device, int priority) override;
  void launch(const Stream& stream, std::function<void()> work) override;
  std::uint64_t record(const Stream& stream) override;
  bool query(const Stream& stream, std::uint64_t sequence) override;
  void synchronize(const Stream& stream, std::uint64_t sequence) override;
  void wait(const Stream& waiter, const Stream& stream, std::uint64_t sequence) override;
  void synchronize_device(Device device) override;

  // The cudaStream_t of `stream` (created at its first use); checks the device and the id.
  cudaStream_t native(const Stream& stream);

 private:
  struct PerStream {
    cudaStream_t handle = nullptr;  // id 0: the null stream; others once created
    bool created = false;
    std::uint64_t recorded = 0;   // numbers handed out by record()
    std::uint64_t completed = 0;  // every number up to this one is known done
    std::deque<std::pair<std::uint64_t, cudaEvent_t>> pending;  // recorded, not known done
  };
  struct PerDevice {
    explicit PerDevice(int index) : index(index), events(index) {}
    int index;
    std::mutex mutex;
    std::array<PerStream, kStreamsPerDevice + 1> streams;
    std::uint64_t next_stream = 0;
    int synchronizing = 0;  // host waits on a pending event in progress: keep events alive
    std::string error;      // the first failure of launched host work, until reported
    EventPool events;
  };
  PerDevice& device(Device device);  // checked; created at its first use
  PerStream& stream_locked(PerDevice& per, int index, std::uint64_t id);
  cudaEvent_t event_locked(PerStream& s, std::uint64_t sequence, const Stream& stream);
  void complete_locked(PerDevice& per, PerStream& s, std::uint64_t sequence);
  // The first failure of launched host work, then a bad index a kernel recorded (index_fault.h).
  void throw_pending_error(PerDevice& per);

  std::mutex devices_mutex_;
  std::array<std::unique_ptr<PerDevice>, kMaxDevices> devices_;
};

CudaStreams& streams();  // the process's, never destroyed (as a CUDA context outlives statics)

}  // namespace fsdp::cuda
