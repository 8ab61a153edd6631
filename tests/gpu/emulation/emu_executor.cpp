// The CTA scheduler behind emu_executor.h. A CTA's threads run on worker fibers: a worker takes
// the next unstarted thread (highest index first: a leader that writes before a missing barrier
// then runs after its readers, and the race shows), runs it until it exits, then takes the
// next; when its thread waits at a barrier the worker parks with it and the scheduler starts
// or resumes another. So a kernel without barriers costs one fiber per CTA, and one with them a
// fiber per thread. The last thread to arrive completes a barrier and is queued behind the
// others it releases. Nothing runnable while threads remain is a deadlock: reported, and the
// parked threads resumed to throw (Abandoned), so that every fiber ends by returning.
#include "tests/gpu/emulation/emu_executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "tests/gpu/emulation/emu_runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

__thread __attribute__((tls_model("initial-exec"))) uint3 threadIdx;
__thread __attribute__((tls_model("initial-exec"))) uint3 blockIdx;
__thread __attribute__((tls_model("initial-exec"))) uint3 blockDim;
__thread __attribute__((tls_model("initial-exec"))) uint3 gridDim;

namespace fsdp::emu {
namespace {

namespace ctx = boost::context;

// Kernels' arrays live on their fiber's stack (the flash kernels' register tiles, a few KiB):
// 256 KiB is ample, and only touched pages cost memory. A guard page below each stack
// turns an overflow into a crash, not a silent overwrite.
constexpr std::size_t kStackBytes = 256 * 1024;

// Fiber stacks kept for reuse by this OS thread's later CTAs and launches.
class StackPool {
 public:
  ctx::stack_context take() {
    if (free_.empty()) return ctx::protected_fixedsize_stack(kStackBytes).allocate();
    const ctx::stack_context s = free_.back();
    free_.pop_back();
    return s;
  }
  void give(ctx::stack_context s) { free_.push_back(s); }
  ~StackPool() {
    ctx::protected_fixedsize_stack stacks(kStackBytes);
    for (ctx::stack_context& s : free_) stacks.deallocate(s);
  }

 private:
  std::vector<ctx::stack_context> free_;
};

struct Worker {
  ctx::fiber fiber;  // the worker, while it is parked
  ctx::fiber back;   // the scheduler, while the worker runs
  bool finished = false;
  const void* stack_bottom = nullptr;  // for AddressSanitizer's switch notes
  std::size_t stack_size = 0;
  void* fake_stack = nullptr;
};

// Boost.Context's StackAllocator over this thread's pool; notes the worker's stack.
struct PooledStack {
  StackPool* pool;
  Worker* worker;
  ctx::stack_context allocate() {
    const ctx::stack_context s = pool->take();
    worker->stack_bottom = static_cast<char*>(s.sp) - s.size;
    worker->stack_size = s.size;
    return s;
  }
  void deallocate(ctx::stack_context& s) noexcept { pool->give(s); }
};

// AddressSanitizer is told of every switch between stacks (Debian's Boost.Context is built
// without its own notes): without them a fiber's frames read as overflows of another's.
thread_local const void* scheduler_stack_bottom = nullptr;
thread_local std::size_t scheduler_stack_size = 0;
#if defined(__SANITIZE_ADDRESS__)
void switch_start(void** fake, const void* bottom, std::size_t size) {
  __sanitizer_start_switch_fiber(fake, bottom, size);
}
void switch_finish(void* fake, const void** bottom, std::size_t* size) {
  __sanitizer_finish_switch_fiber(fake, bottom, size);
}
#else
void switch_start(void**, const void*, std::size_t) {}
void switch_finish(void*, const void**, std::size_t*) {}
#endif

// Thrown in a parked thread of a faulted CTA when the scheduler resumes it to end: its frames
// unwind to worker_loop, so every fiber ends by returning (no unwinding by Boost.Context).
struct Abandoned {};

struct Warp {
  int lanes = 0;             // lanes the block has in this warp
  unsigned present = 0;      // their mask
  int arrived = 0;           // lanes waiting at the current operation
  unsigned generation = 0;   // operations completed: a shuffle's slots alternate by its parity
  const char* op = nullptr;  // the operation the arrived lanes wait at
  std::uint64_t slots[2][32] = {};
  std::uint32_t stage[2][32 * kStageWords] = {};  // warp_stage's, alternating as slots
};

struct Cta {
  const char* kernel = nullptr;
  std::byte* dynamic_shared = nullptr;  // the launch's buffer, poisoned per CTA
  void (*thread)(void*) = nullptr;
  void* closure = nullptr;
  uint3 dims{};
  int count = 0;
  int started = 0, exited = 0, at_block = 0;
  int current = -1;                // the thread running now
  std::vector<uint3> index;        // per thread: its threadIdx
  std::vector<Worker*> worker_of;  // per thread: the worker it runs on
  std::vector<Warp> warps;
  std::deque<int> runnable;  // threads whose barrier completed, to resume in order
  std::vector<std::unique_ptr<Worker>> workers;
  std::string fault;        // set: the launch ends
  bool abandoning = false;  // the fault's parked threads are being resumed to end
};

thread_local Cta* current_cta = nullptr;
thread_local std::uint64_t cta_serial = 0;  // CTAs this OS thread has started
// Per __shared__ variable: the serial of the CTA that last poisoned it.
thread_local std::vector<std::pair<void*, std::uint64_t>> shared_poisoned;
thread_local Worker* current_worker = nullptr;
thread_local StackPool stack_pool;

void make_current(Cta& c, int t) {
  c.current = t;
  threadIdx = c.index[t];
}

std::string where(const Cta& c) {
  return fmt::format("{}: block ({},{},{})", c.kernel, blockIdx.x, blockIdx.y, blockIdx.z);
}

// Parks the running thread's worker and returns to the scheduler; returns when resumed, or
// throws Abandoned when the CTA has faulted.
void park() {
  Worker* w = current_worker;
  switch_start(&w->fake_stack, scheduler_stack_bottom, scheduler_stack_size);
  w->back = std::move(w->back).resume();
  switch_finish(w->fake_stack, &scheduler_stack_bottom, &scheduler_stack_size);
  if (current_cta->abandoning) throw Abandoned{};
}

// Ends the launch from inside a thread: the scheduler reports `message`.
[[noreturn]] void fail(Cta& c, std::string message) {
  c.fault = std::move(message);
  park();
  std::abort();  // unreachable: a faulted CTA's threads resume only to be abandoned
}

void worker_loop(Cta& c, Worker* w) {
  while (c.started < c.count && c.fault.empty()) {
    const int t = c.count - 1 - c.started++;
    c.worker_of[t] = w;
    make_current(c, t);
    try {
      c.thread(c.closure);
    } catch (const Abandoned&) {
      break;
    } catch (const std::exception& e) {
      const uint3 i = c.index[t];
      c.fault = fmt::format("{}, thread ({},{},{}): {}", where(c), i.x, i.y, i.z, e.what());
      break;
    }
    ++c.exited;
  }
  w->finished = true;
}

void resume(Cta& c, Worker* w, int t) {
  if (t >= 0) make_current(c, t);
  current_worker = w;
  void* fake = nullptr;
  switch_start(&fake, w->stack_bottom, w->stack_size);
  w->fiber = std::move(w->fiber).resume();
  switch_finish(fake, nullptr, nullptr);
}

void start_worker(Cta& c) {
  auto owned = std::make_unique<Worker>();
  Worker* w = owned.get();
  c.workers.push_back(std::move(owned));
  w->fiber =
      ctx::fiber(std::allocator_arg, PooledStack{&stack_pool, w}, [&c, w](ctx::fiber&& back) {
        switch_finish(nullptr, &scheduler_stack_bottom, &scheduler_stack_size);
        w->back = std::move(back);
        worker_loop(c, w);
        switch_start(nullptr, scheduler_stack_bottom, scheduler_stack_size);
        return std::move(w->back);
      });
  resume(c, w, -1);
}

// Why nothing can run: who waits where, and how many exited.
std::string deadlock_message(const Cta& c) {
  std::string others;
  int warp_waiters = 0;
  for (std::size_t w = 0; w < c.warps.size(); ++w)
    if (c.warps[w].arrived > 0) {
      warp_waiters += c.warps[w].arrived;
      others += fmt::format(", {} wait at {} (warp {})", c.warps[w].arrived, c.warps[w].op, w);
    }
  if (c.at_block > 0) {
    const std::string rest = warp_waiters == 0
                                 ? "the rest exited without reaching it"
                                 : fmt::format("the rest: {} exited{}", c.exited, others);
    return fmt::format("{}: {} of {} threads wait at __syncthreads, {}", where(c), c.at_block,
                       c.count, rest);
  }
  for (std::size_t w = 0; w < c.warps.size(); ++w)
    if (c.warps[w].arrived > 0)
      return fmt::format(
          "{}, warp {}: {} of {} lanes wait at {}, the rest exited without reaching it", where(c),
          w, c.warps[w].arrived, c.warps[w].lanes, c.warps[w].op);
  return fmt::format("{}: no thread can run", where(c));
}

// Runs one CTA to its end or its fault (c.fault set).
void run_cta(Cta& c) {
  while (c.fault.empty()) {
    if (!c.runnable.empty()) {
      const int t = c.runnable.front();
      c.runnable.pop_front();
      resume(c, c.worker_of[t], t);
    } else if (c.started < c.count) {
      start_worker(c);
    } else if (c.exited == c.count) {
      break;
    } else {
      c.fault = deadlock_message(c);
    }
  }
  // After a fault: each parked thread resumes to throw Abandoned, and its worker ends.
  c.abandoning = !c.fault.empty();
  for (const std::unique_ptr<Worker>& w : c.workers)
    if (!w->finished) resume(c, w.get(), -1);
  c.abandoning = false;
  c.workers.clear();
}

void reset(Cta& c, uint3 dims) {
  c.count = static_cast<int>(dims.x * dims.y * dims.z);
  if (c.index.size() != static_cast<std::size_t>(c.count) || c.dims.x != dims.x ||
      c.dims.y != dims.y) {
    c.index.resize(c.count);
    for (int t = 0; t < c.count; ++t) {
      const unsigned u = static_cast<unsigned>(t);
      c.index[t] = {u % dims.x, u / dims.x % dims.y, u / (dims.x * dims.y)};
    }
  }
  c.dims = dims;
  c.started = c.exited = c.at_block = 0;
  c.current = -1;
  c.worker_of.assign(c.count, nullptr);
  c.warps.assign((c.count + 31) / 32, Warp{});
  for (std::size_t w = 0; w < c.warps.size(); ++w) {
    Warp& warp = c.warps[w];
    warp.lanes = std::min(32, c.count - static_cast<int>(w) * 32);
    warp.present = warp.lanes == 32 ? ~0u : (1u << warp.lanes) - 1;
  }
  c.runnable.clear();
}

// Completes a barrier of threads [first, first + n), all waiting but the running one: queues
// them in order and the running thread last, so that it resumes after them (a thread that
// writes after the barrier then does so after the others have read: a missing barrier after
// it shows).
void release(Cta& c, int first, int n) {
  for (int t = first + n - 1; t >= first; --t)
    if (t != c.current) c.runnable.push_back(t);
  c.runnable.push_back(c.current);
  park();
}

Warp& arrive_at_warp(Cta& c, unsigned mask, const char* op) {
  const int lane = c.current & 31;
  Warp& w = c.warps[c.current >> 5];
  if ((mask & w.present) != w.present)
    fail(c, fmt::format("{}, warp {}: {} with mask {:#010x} leaves out lanes of the warp (lanes "
                        "{:#010x}): the emulation runs whole-warp operations only",
                        where(c), c.current >> 5, op, mask, w.present));
  if (w.arrived > 0 && w.op != op && std::strcmp(w.op, op) != 0)
    fail(c, fmt::format("{}, warp {}: lane {} reaches {} while {} lanes wait at {}: the lanes of "
                        "a warp must meet at the same warp operation",
                        where(c), c.current >> 5, lane, op, w.arrived, w.op));
  w.op = op;
  return w;
}

// Waits at the warp's current operation; the last lane completes it.
void wait_at_warp(Cta& c, Warp& w) {
  if (++w.arrived == w.lanes) {
    w.arrived = 0;
    w.op = nullptr;
    ++w.generation;
    release(c, c.current & ~31, w.lanes);
  } else {
    park();
  }
}

// A heap block of exactly the launch's bytes (AddressSanitizer's redzone right after its end),
// reused by the launch's CTAs one after another.
struct AlignedFree {
  void operator()(std::byte* p) const {
    ::operator delete (p, std::align_val_t{kDynamicSharedAlignment});
  }
};
using DynamicShared = std::unique_ptr<std::byte, AlignedFree>;

DynamicShared allocate_dynamic_shared(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  return DynamicShared(
      static_cast<std::byte*>(::operator new (bytes, std::align_val_t{kDynamicSharedAlignment})));
}

}  // namespace

void run_grid(const char* kernel, dim3 grid, dim3 block, std::size_t dynamic_shared_bytes,
              void (*thread)(void*), void* closure) {
  const DynamicShared dynamic = allocate_dynamic_shared(dynamic_shared_bytes);
  Cta c;
  c.kernel = kernel;
  c.dynamic_shared = dynamic.get();
  c.thread = thread;
  c.closure = closure;
  Cta* const outer = current_cta;  // none: kernels launch nothing; kept for safety
  current_cta = &c;
  gridDim = {grid.x, grid.y, grid.z};
  blockDim = {block.x, block.y, block.z};
  for (unsigned z = 0; z < grid.z && c.fault.empty(); ++z)
    for (unsigned y = 0; y < grid.y && c.fault.empty(); ++y)
      for (unsigned x = 0; x < grid.x && c.fault.empty(); ++x) {
        blockIdx = {x, y, z};
        ++cta_serial;
        reset(c, {block.x, block.y, block.z});
        if (c.dynamic_shared != nullptr) std::memset(c.dynamic_shared, 0xff, dynamic_shared_bytes);
        run_cta(c);
      }
  current_cta = outer;
  if (!c.fault.empty()) fsdp_emu_report_fault(cudaErrorLaunchFailure, c.fault.c_str());
}

void* dynamic_shared(std::size_t alignment) {
  Cta& c = *current_cta;
  if (c.dynamic_shared == nullptr)
    fail(c, fmt::format("{}: extern __shared__ memory in a kernel launched with 0 bytes of dynamic "
                        "shared memory (the launch's third <<<>>> argument)",
                        where(c)));
  if (alignment > kDynamicSharedAlignment)
    fail(c, fmt::format("{}: extern __shared__ memory aligned to {} bytes; the emulation gives "
                        "{} and the device does not promise more",
                        where(c), alignment, kDynamicSharedAlignment));
  return c.dynamic_shared;
}

std::uint64_t running_cta_serial() {
  return cta_serial;
}

void poison_shared(void* p, std::size_t bytes) {
  for (auto& [q, serial] : shared_poisoned)
    if (q == p) {
      if (serial == cta_serial) return;
      serial = cta_serial;
      std::memset(p, 0xff, bytes);
      return;
    }
  shared_poisoned.emplace_back(p, cta_serial);
  std::memset(p, 0xff, bytes);
}

void sync_block() {
  Cta& c = *current_cta;
  if (++c.at_block == c.count) {
    c.at_block = 0;
    release(c, 0, c.count);
  } else {
    park();
  }
}

void sync_warp(unsigned mask, const char* op) {
  Cta& c = *current_cta;
  wait_at_warp(c, arrive_at_warp(c, mask, op));
}

std::uint64_t warp_exchange(unsigned mask, std::uint64_t value, int source, const char* op) {
  Cta& c = *current_cta;
  Warp& w = arrive_at_warp(c, mask, op);
  if (source < 0 || source > 31 || !(w.present >> source & 1u))
    fail(c, fmt::format("{}, warp {}: lane {} reads lane {} with {}, which the warp does not have "
                        "({} lanes): undefined on the device",
                        where(c), c.current >> 5, c.current & 31, source, op, w.lanes));
  const unsigned parity = w.generation & 1u;
  w.slots[parity][c.current & 31] = value;
  wait_at_warp(c, w);
  return w.slots[parity][source];
}

const std::uint32_t* warp_stage(unsigned mask, const std::uint32_t* value, int words,
                                const char* op) {
  Cta& c = *current_cta;
  Warp& w = arrive_at_warp(c, mask, op);
  // Two buffers by the generation's parity, as the shuffles' slots: a lane deposits into one
  // only after every lane has left the operation before, so no deposit overwrites a buffer
  // still being read.
  std::uint32_t* stage = w.stage[w.generation & 1u];
  std::memcpy(stage + (c.current & 31) * kStageWords, value, sizeof(std::uint32_t) * words);
  wait_at_warp(c, w);
  return stage;
}

}  // namespace fsdp::emu
