// The emulated CUDA runtime's state (tests/gpu/emulation/cudart): devices, streams as worker
// threads running their queue in order, events as (stream, position) marks, the device-memory
// map, the calling thread's last error and the sticky fault. Internal to the library.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "tests/gpu/emulation/emu_skip.h"

// The runtime's opaque handle types, completed here.
struct CUstream_st {
  int device = 0;
  bool blocking = true;  // synchronises with the legacy default stream
  bool destroyed = false;
  struct Op {
    std::function<void()> run;        // empty for a wait
    CUstream_st* wait_for = nullptr;  // a wait: until wait_for has completed wait_position ops
    std::uint64_t wait_position = 0;
  };
  std::deque<Op> queue;
  std::uint64_t submitted = 0;  // ops queued so far
  std::uint64_t completed = 0;  // ops finished so far
  bool started = false;         // its worker thread (detached) runs
};

struct EventRecord {
  std::chrono::steady_clock::time_point when{};  // set by the record's op as it runs
};
struct CUevent_st {
  unsigned flags = 0;
  CUstream_st* stream = nullptr;  // the last record's stream (null: never recorded)
  std::uint64_t position = 0;     // complete once stream->completed reaches it
  std::shared_ptr<EventRecord> record;
};

namespace fsdp::emu {

// One lock and one condition for every stream's queue and counters: ops are coarse (a kernel,
// a copy), so contention does not matter and cross-stream waits stay simple.
std::mutex& lock();
std::condition_variable& changed();

int device_count();
int& current_device();       // the calling thread's
std::size_t memory_limit();  // per device: FSDP_EMU_CUDA_MEMORY_BYTES, default 4 GiB

// The stream a handle names on the calling thread's device (null and cudaStreamLegacy: the
// device's legacy default stream; cudaStreamPerThread too, as this runtime has no per-thread
// streams). Null if the handle is a destroyed stream.
CUstream_st* resolve(cudaStream_t stream);
// Queues `run` on `stream` in stream order (with the legacy default stream's implicit
// synchronisation), starting its worker at first use; returns the op's position.
std::uint64_t enqueue(CUstream_st* stream, std::function<void()> run);
// Queues a wait for `other` to complete `position` ops.
void enqueue_wait(CUstream_st* stream, CUstream_st* other, std::uint64_t position);
// Blocks until `stream` has completed `position` ops.
void wait_until(CUstream_st* stream, std::uint64_t position);
// FSDP_EMU_PROFILE=1: a host wait made by `call`, in the profile printed at exit.
void count_host_wait(const char* call);
// FSDP_EMU_SKIP_KERNELS (emu_skip.h): a kernel, device copy or memset not done, the count printed
// at exit.
void count_skipped();
// Every stream of `device`, drained to what was queued before the call.
void synchronize_device(int device);

// The calling thread's last error: `set_error` keeps a failure and returns it.
cudaError_t set_error(cudaError_t error);
cudaError_t take_last_error();
// A fault while work ran (sticky: every synchronising call returns it from then on).
void report_fault(cudaError_t error, const std::string& message);
cudaError_t sticky_error();

// A refused call: one line on stderr naming the call and what was wrong, the error kept.
cudaError_t refuse(cudaError_t error, const std::string& message);

// The device-memory map.
enum class MemoryKind { device, pinned };
struct Allocation {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  int device = 0;
  MemoryKind kind = MemoryKind::device;
};
// The allocation holding [p, p + bytes), if any (bytes 0: holding p).
bool find_allocation(const void* p, std::size_t bytes, Allocation* out);
bool peer_access_enabled(int device, int peer);

}  // namespace fsdp::emu
