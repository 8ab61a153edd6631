// Streams, events, host functions and launches of the emulated CUDA runtime: each stream a
// worker thread running its queue in order, so work is as asynchronous to the host as on a GPU
// (a missing wait shows as a wrong result or a sanitizer finding, not as luck), waits across
// streams as queued waits, events as positions in a stream's queue.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu/emulation/cudart/emu_state.h"
#include "tests/gpu/emulation/emu_func_attributes.h"
#include "tests/gpu/emulation/emu_runtime.h"

namespace fsdp::emu {
namespace {

// Never destroyed: workers may still wait on them while the program's statics go away.
std::mutex* const g_lock = new std::mutex;
std::condition_variable* const g_changed = new std::condition_variable;
std::vector<CUstream_st*>* const g_streams = new std::vector<CUstream_st*>;  // all, never freed
std::vector<CUstream_st*>* const g_legacy = new std::vector<CUstream_st*>;   // per device

// FSDP_EMU_PROFILE=1: launches per kernel, printed at exit (the host's launch count per step
// is what a GPU's launch overhead scales with).
struct LaunchCount {
  std::uint64_t launches = 0, threads = 0;
};
std::mutex* const g_profile_lock = new std::mutex;
std::map<std::string, LaunchCount>* const g_profile = new std::map<std::string, LaunchCount>;
// Host waits by the call that waited (FSDP_EMU_PROFILE=1): a training step should have none
// but the one that reads its loss.
std::map<std::string, std::uint64_t>* const g_host_waits = new std::map<std::string, std::uint64_t>;
// FSDP_EMU_SKIP_KERNELS: the work not done (count_skipped).
std::atomic<std::uint64_t>* const g_skipped = new std::atomic<std::uint64_t>(0);

bool profiling();

void print_profile() {
  std::lock_guard<std::mutex> lk(*g_profile_lock);
  std::vector<std::pair<std::string, LaunchCount>> rows(g_profile->begin(), g_profile->end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.launches > b.second.launches; });
  std::uint64_t total = 0;
  for (const auto& r : rows) total += r.second.launches;
  std::fprintf(stderr, "emulated CUDA profile: %llu kernel launches\n",
               static_cast<unsigned long long>(total));
  for (const auto& [name, c] : rows)
    std::fprintf(stderr, "  %10llu  %s (%llu threads)\n",
                 static_cast<unsigned long long>(c.launches), name.c_str(),
                 static_cast<unsigned long long>(c.threads));
  std::uint64_t waits = 0;
  for (const auto& [call, n] : *g_host_waits) waits += n;
  std::fprintf(stderr, "emulated CUDA profile: %llu host waits\n",
               static_cast<unsigned long long>(waits));
  for (const auto& [call, n] : *g_host_waits)
    std::fprintf(stderr, "  %10llu  %s\n", static_cast<unsigned long long>(n), call.c_str());
}

bool profiling() {
  static const bool on = [] {
    const char* v = std::getenv("FSDP_EMU_PROFILE");
    const bool enabled = v != nullptr && *v != '\0' && *v != '0';
    if (enabled) std::atexit(print_profile);
    return enabled;
  }();
  return on;
}

void count_launch(const char* kernel, std::uint64_t threads) {
  if (!profiling()) return;
  std::lock_guard<std::mutex> lk(*g_profile_lock);
  LaunchCount& c = (*g_profile)[kernel];
  ++c.launches;
  c.threads += threads;
}

bool ready(const CUstream_st::Op& op) {
  return op.wait_for == nullptr || op.wait_for->completed >= op.wait_position;
}

void run_worker(CUstream_st* s) {
  current_device() = s->device;  // work on a stream runs on its device (checks ask which)
  std::unique_lock<std::mutex> lk(*g_lock);
  for (;;) {
    g_changed->wait(lk, [&] {
      return (!s->queue.empty() && ready(s->queue.front())) || (s->destroyed && s->queue.empty());
    });
    if (s->queue.empty()) return;  // destroyed and drained
    CUstream_st::Op op = std::move(s->queue.front());
    s->queue.pop_front();
    if (op.run) {
      lk.unlock();
      try {
        op.run();
      } catch (const std::exception& e) {
        report_fault(cudaErrorLaunchFailure, e.what());
      } catch (...) {
        report_fault(cudaErrorLaunchFailure, "work queued on a stream threw");
      }
      lk.lock();
    }
    ++s->completed;
    g_changed->notify_all();
  }
}

// Under the lock.
void push(CUstream_st* s, CUstream_st::Op op) {
  if (!s->started) {
    s->started = true;
    std::thread(run_worker, s).detach();
  }
  s->queue.push_back(std::move(op));
  ++s->submitted;
}

// Under the lock: the legacy default stream's implicit synchronisation with blocking streams.
void implicit_waits(CUstream_st* s) {
  CUstream_st* legacy = (*g_legacy)[static_cast<std::size_t>(s->device)];
  if (s == legacy) {
    for (CUstream_st* b : *g_streams)
      if (b != legacy && b->device == s->device && b->blocking && !b->destroyed &&
          b->submitted > b->completed)
        push(s, {{}, b, b->submitted});
  } else if (s->blocking && legacy->submitted > legacy->completed) {
    push(s, {{}, legacy, legacy->submitted});
  }
}

CUstream_st* make_stream(int device, bool blocking) {
  auto* s = new CUstream_st;
  s->device = device;
  s->blocking = blocking;
  g_streams->push_back(s);
  return s;
}

}  // namespace

std::mutex& lock() {
  return *g_lock;
}
std::condition_variable& changed() {
  return *g_changed;
}

CUstream_st* resolve(cudaStream_t stream) {
  std::lock_guard<std::mutex> lk(*g_lock);
  if (g_legacy->empty())
    for (int d = 0; d < device_count(); ++d) g_legacy->push_back(make_stream(d, false));
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
    return (*g_legacy)[static_cast<std::size_t>(current_device())];
  return stream->destroyed ? nullptr : stream;
}

std::uint64_t enqueue(CUstream_st* s, std::function<void()> run) {
  std::lock_guard<std::mutex> lk(*g_lock);
  implicit_waits(s);
  push(s, {std::move(run), nullptr, 0});
  g_changed->notify_all();
  return s->submitted;
}

void enqueue_wait(CUstream_st* s, CUstream_st* other, std::uint64_t position) {
  std::lock_guard<std::mutex> lk(*g_lock);
  if (other == s || other->completed >= position) return;
  push(s, {{}, other, position});
  g_changed->notify_all();
}

void count_skipped() {
  static const bool reported = [] {
    std::atexit([] {
      std::fprintf(stderr,
                   "emulated CUDA: FSDP_EMU_SKIP_KERNELS: skipped %llu kernels, device copies "
                   "and memsets\n",
                   static_cast<unsigned long long>(g_skipped->load()));
    });
    return true;
  }();
  (void)reported;
  g_skipped->fetch_add(1, std::memory_order_relaxed);
}

void count_host_wait(const char* call) {
  if (!profiling()) return;
  std::lock_guard<std::mutex> lk(*g_profile_lock);
  ++(*g_host_waits)[call];
}

void wait_until(CUstream_st* s, std::uint64_t position) {
  std::unique_lock<std::mutex> lk(*g_lock);
  g_changed->wait(lk, [&] { return s->completed >= position; });
}

void synchronize_device(int device) {
  std::vector<std::pair<CUstream_st*, std::uint64_t>> marks;
  {
    std::lock_guard<std::mutex> lk(*g_lock);
    for (CUstream_st* s : *g_streams)
      if (s->device == device) marks.emplace_back(s, s->submitted);
  }
  for (auto& [s, position] : marks) wait_until(s, position);
}

}  // namespace fsdp::emu

using namespace fsdp::emu;

extern "C" {

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (stream == nullptr) return refuse(cudaErrorInvalidValue, "cudaStreamCreateWithFlags: null");
  resolve(nullptr);  // the legacy streams first
  std::lock_guard<std::mutex> lk(lock());
  *stream = make_stream(current_device(), (flags & cudaStreamNonBlocking) == 0);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  if (s == nullptr || stream == nullptr || stream == cudaStreamLegacy)
    return refuse(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: not a live stream");
  std::lock_guard<std::mutex> lk(lock());
  s->destroyed = true;  // its queued work still runs; the handle is dead
  changed().notify_all();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  if (s == nullptr)
    return refuse(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: a destroyed stream");
  std::uint64_t position;
  {
    std::lock_guard<std::mutex> lk(lock());
    position = s->submitted;
  }
  count_host_wait("cudaStreamSynchronize");
  wait_until(s, position);
  return set_error(sticky_error());
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  if (s == nullptr)
    return refuse(cudaErrorInvalidResourceHandle, "cudaStreamQuery: a destroyed stream");
  if (cudaError_t e = sticky_error()) return set_error(e);
  std::lock_guard<std::mutex> lk(lock());
  return s->completed >= s->submitted ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaDeviceSynchronize(void) {
  count_host_wait("cudaDeviceSynchronize");
  synchronize_device(current_device());
  return set_error(sticky_error());
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  CUstream_st* s = resolve(stream);
  if (s == nullptr)
    return refuse(cudaErrorInvalidResourceHandle, "cudaLaunchHostFunc: a destroyed stream");
  if (fn == nullptr) return refuse(cudaErrorInvalidValue, "cudaLaunchHostFunc: null function");
  if (cudaError_t e = sticky_error()) return set_error(e);
  enqueue(s, [fn, user_data] { fn(user_data); });
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr) return refuse(cudaErrorInvalidValue, "cudaEventCreateWithFlags: null");
  *event = new CUevent_st;
  (*event)->flags = flags;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr) return refuse(cudaErrorInvalidResourceHandle, "cudaEventDestroy: null");
  delete event;  // queued records hold their own EventRecord
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr) return refuse(cudaErrorInvalidResourceHandle, "cudaEventRecord: null");
  CUstream_st* s = resolve(stream);
  if (s == nullptr)
    return refuse(cudaErrorInvalidResourceHandle, "cudaEventRecord: a destroyed stream");
  auto record = std::make_shared<EventRecord>();
  const std::uint64_t position =
      enqueue(s, [record] { record->when = std::chrono::steady_clock::now(); });
  std::lock_guard<std::mutex> lk(lock());
  event->stream = s;
  event->position = position;
  event->record = record;
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (event == nullptr) return refuse(cudaErrorInvalidResourceHandle, "cudaEventQuery: null");
  if (cudaError_t e = sticky_error()) return set_error(e);
  std::lock_guard<std::mutex> lk(lock());
  if (event->stream == nullptr) return cudaSuccess;  // never recorded: complete
  return event->stream->completed >= event->position ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return refuse(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: null");
  CUstream_st* s;
  std::uint64_t position;
  {
    std::lock_guard<std::mutex> lk(lock());
    s = event->stream;
    position = event->position;
  }
  count_host_wait("cudaEventSynchronize");
  if (s != nullptr) wait_until(s, position);
  return set_error(sticky_error());
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr || start == nullptr || end == nullptr)
    return refuse(cudaErrorInvalidValue, "cudaEventElapsedTime: null");
  if ((start->flags | end->flags) & cudaEventDisableTiming)
    return refuse(cudaErrorInvalidResourceHandle,
                  "cudaEventElapsedTime: an event created with cudaEventDisableTiming");
  std::lock_guard<std::mutex> lk(lock());
  if (start->stream == nullptr || end->stream == nullptr)
    return refuse(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an unrecorded event");
  if (start->stream->completed < start->position || end->stream->completed < end->position)
    return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(end->record->when - start->record->when).count();
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (event == nullptr)
    return refuse(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: null event");
  CUstream_st* s = resolve(stream);
  if (s == nullptr)
    return refuse(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: a destroyed stream");
  CUstream_st* other;
  std::uint64_t position;
  {
    std::lock_guard<std::mutex> lk(lock());
    other = event->stream;
    position = event->position;
  }
  if (other != nullptr) enqueue_wait(s, other, position);  // never recorded: no wait
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* function, cudaFuncAttribute attr, int value) {
  std::string why;
  const cudaError_t e = set_func_attribute(current_device(), function, attr, value, why);
  return e == cudaSuccess ? e : refuse(e, why);
}

cudaError_t fsdp_emu_launch(cudaStream_t stream, dim3 grid, dim3 block,
                            std::size_t dynamic_shared_bytes, const char* kernel,
                            const void* function, void (*run)(void*), void* closure,
                            void (*destroy)(void*)) {
  auto refused = [&](cudaError_t e, const std::string& why) {
    destroy(closure);
    return refuse(e, std::string("kernel launch ") + kernel + ": " + why);
  };
  if (cudaError_t e = sticky_error()) {
    destroy(closure);
    return set_error(e);
  }
  const unsigned long long threads = static_cast<unsigned long long>(block.x) * block.y * block.z;
  char dims[160];
  std::snprintf(dims, sizeof dims, "grid (%u, %u, %u), block (%u, %u, %u)", grid.x, grid.y, grid.z,
                block.x, block.y, block.z);
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0)
    return refused(cudaErrorInvalidConfiguration, std::string("a zero dimension in ") + dims);
  if (threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
    return refused(cudaErrorInvalidConfiguration,
                   std::string("more threads in a block than 1024 (1024, 1024, 64): ") + dims);
  if (grid.x > 2147483647u || grid.y > 65535u || grid.z > 65535u)
    return refused(cudaErrorInvalidConfiguration,
                   std::string("a grid beyond (2^31-1, 65535, 65535): ") + dims);
  if (const std::string why =
          dynamic_shared_refusal(current_device(), function, dynamic_shared_bytes);
      !why.empty())
    return refused(cudaErrorInvalidValue, why);
  CUstream_st* s = resolve(stream);
  if (s == nullptr) return refused(cudaErrorInvalidResourceHandle, "a destroyed stream");
  if (s->device != current_device())
    return refused(cudaErrorInvalidResourceHandle,
                   "the stream belongs to cuda:" + std::to_string(s->device) +
                       " but the current device is cuda:" + std::to_string(current_device()));
  count_launch(kernel, threads * grid.x * grid.y * grid.z);
  if (skipping_device_work()) {
    count_skipped();
    destroy(closure);
    return cudaSuccess;
  }
  enqueue(s, [run, closure, destroy] {
    struct Destroy {
      void (*destroy)(void*);
      void* closure;
      ~Destroy() { destroy(closure); }
    } guard{destroy, closure};
    run(closure);
  });
  return cudaSuccess;
}

}  // extern "C"
