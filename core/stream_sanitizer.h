// The stream sanitizer, PyTorch's CUDA sanitizer (torch.cuda._sanitizer) for our accelerators:
// while enabled it records, per storage, which work item on which stream read or wrote which
// bytes, and which events order the streams (a vector clock per stream: the last item of each
// other stream that its next item is known to run after). An access that is not ordered after a
// conflicting access on another stream (a write against anything, a read against a write) is
// reported with both accesses' ops, streams and the storage's owner (FSDP names its flat
// parameters), as is a storage freed while another stream's unordered work still uses it and
// that stream was not recorded on it (record_stream).
//
// The device's stream backend reports launches, events and host waits (core/fake_cuda/); whoever
// queues work that touches device memory reports the accesses after launching it (the fake_cuda
// kernel table, the collectives); Storage reports frees and record_stream. A backend whose
// streams run the device's own work rather than launched items (CUDA: kernels and copies queued
// by the host) numbers its events, not its items: its work reports itself with on_work (one item
// each), and its events and waits go through the *_sequence hooks, which map an event's number to
// the item it follows. With the sanitizer disabled every hook is one relaxed atomic load.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/stream.h"

namespace fsdp::stream_sanitizer {

namespace detail {
extern std::atomic<int> enabled_count;
}
inline bool enabled() {
  return detail::enabled_count.load(std::memory_order_relaxed) > 0;
}

// What one queued item does to device memory: `bytes` bytes from `ptr` (device addresses).
struct Access {
  const void* ptr = nullptr;
  std::size_t bytes = 0;
  bool write = false;
};

// --- hooks (each a no-op unless enabled())
void on_launch(const Stream& stream, std::uint64_t item);  // an item queued on `stream`
void on_record(const Stream& stream, std::uint64_t item);  // an event recorded after `item`
void on_wait(const Stream& waiter, const Stream& stream, std::uint64_t item);
void on_synchronize(const Stream& stream, std::uint64_t item);  // the host waited for `item`
void on_synchronize_device(Device device);
// The accesses of the item just launched on `stream`; `what` names it ("linear", "all_gather").
void on_accesses(const Stream& stream, const char* what, const std::vector<Access>& accesses);
void on_record_stream(const void* base, const Stream& stream);
// The hooks of a backend that numbers events (CUDA): one item of device work queued on `stream`
// by the host, with its accesses (on_launch and on_accesses in one); event number `sequence`
// recorded on `stream` after its work so far; `waiter` waits for it; the host waited for it.
// An event recorded while the sanitizer was off orders nothing it knows of.
void on_work(const Stream& stream, const char* what, const std::vector<Access>& accesses);
void on_record_sequence(const Stream& stream, std::uint64_t sequence);
void on_wait_sequence(const Stream& waiter, const Stream& stream, std::uint64_t sequence);
void on_synchronize_sequence(const Stream& stream, std::uint64_t sequence);
// While one is alive on this thread, on_work reports nothing: the work it queues belongs to an item
// already reported whole (a CUDA kernel table family's, whose copies would report themselves).
class WithinWork {
 public:
  WithinWork();
  ~WithinWork();
  WithinWork(const WithinWork&) = delete;
  WithinWork& operator=(const WithinWork&) = delete;
};
// The `bytes` bytes at `base`, allocated on `stream`, are freed.
void on_free(const void* base, std::size_t bytes, const Stream& stream);
// Who the memory [base, base + bytes) belongs to, for reports ("the flat parameter of unit
// 'blocks.0'"); forgotten when it is freed.
void set_owner(const void* base, std::size_t bytes, std::string owner);

// One unsynchronised pair of accesses (or an unrecorded free).
struct Report {
  std::string message;
};
// Enables the sanitizer process-wide while alive (nestable): StreamSanitizerMode
// (core/stream_sanitizer_mode.h) holds one.
class Enable {
 public:
  Enable();
  ~Enable();  // the last one forgets the recorded state (not the reports)
  Enable(const Enable&) = delete;
  Enable& operator=(const Enable&) = delete;
};
// What was reported, from every thread, since the last clear.
std::vector<Report> reports();
void clear_reports();

// The op whose kernels this thread is queuing, for reports (set by StreamSanitizerMode).
const char* current_op();
void set_current_op(const char* op);

}  // namespace fsdp::stream_sanitizer
