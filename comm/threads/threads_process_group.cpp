#include "comm/threads/threads_process_group.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "comm/builtin_backends.h"
#include "comm/collective_accesses.h"
#include "comm/errors.h"
#include "comm/reduce_kernels.h"
#include "comm/registry.h"
#include "core/device_copy.h"
#include "core/error.h"
#include "core/stream_sanitizer.h"

namespace fsdp::comm {

namespace {

const char* at(const void* p, std::size_t bytes) {
  return static_cast<const char*>(p) + bytes;
}
char* at(void* p, std::size_t bytes) {
  return static_cast<char*>(p) + bytes;
}

// Launched host code reaches the device's memory (fake_cuda): the collective runs as host work on
// its stream. Otherwise (CUDA) the host queues the device's copies and reduce kernel there.
bool launched_work_reaches(Device device) {
  return device_copy(device).launched_address != nullptr;
}

DeviceReduceOp device_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return DeviceReduceOp::Sum;
    case ReduceOp::Avg:
      return DeviceReduceOp::Avg;
    case ReduceOp::Max:
      return DeviceReduceOp::Max;
    case ReduceOp::Min:
      return DeviceReduceOp::Min;
  }
  return DeviceReduceOp::Sum;
}

// How one rank moves bytes in exchange(): on the host, or queued on a device stream.
struct Mover {
  const Collective& c;
  const Stream* stream;  // null: on the host

  void copy(void* to, const void* from, std::size_t bytes) const {
    if (bytes == 0 || from == to) return;
    if (stream)
      device_copy(c.device).device_to_device(to, from, bytes, *stream);
    else
      std::memcpy(to, from, bytes);
  }
  void reduce(void* out, const void* const* inputs, int n, std::size_t count) const {
    if (stream)
      device_copy(c.device).reduce(out, inputs, n, count, c.dtype, device_op(c.op), n, *stream);
    else
      reduce_buffers(c.op, c.dtype, out, inputs, n, count, n);
  }
};

}  // namespace

ThreadsProcessGroup::ThreadsProcessGroup(int rank, std::shared_ptr<ThreadsWorld> world)
    : ProcessGroup(rank, world->size()), world_(std::move(world)) {}

ThreadsProcessGroup::~ThreadsProcessGroup() {
  shutdown_executor();
  // Collectives still queued on device streams use this object: wait for them, as the executor
  // finishes its queued ones.
  std::unique_lock lock(turn_mutex_);
  turn_cv_.wait(lock, [&] { return serving_ == next_ticket_; });
}

void ThreadsProcessGroup::sync(const Collective& c) {
  world_->arrive_and_wait(rank(), where(), describe(c));
}

void ThreadsProcessGroup::check_signatures(const Collective& c) {
  const CollectiveSignature mine = world_->slot(rank()).signature;
  for (int r = 0; r < size(); ++r) {
    const CollectiveSignature theirs = world_->slot(r).signature;
    if (theirs == mine) continue;
    // Every rank sees the same slots, so every rank takes this branch; the extra barrier keeps
    // the slots stable until all have read them.
    sync(c);
    throw CommMismatchError(
        fmt::format("{}: mismatched collectives: this rank called {}, rank {} called {}", where(),
                    mine.str(), r, theirs.str()));
  }
}

void ThreadsProcessGroup::check_supported(const Collective& c) const {
  if (c.kind == CollectiveKind::Barrier || c.device.is_cpu()) return;
  if (c.device.is_accelerator()) {
    try {
      if (device_copy(c.device).reduce != nullptr) return;         // queued by the host (CUDA)
      launched_address(c.device, nullptr, "the threads backend");  // throws when unreachable
    } catch (const Error& e) {
      throw ValueError(fmt::format("{}: {} needs memory that work on a stream reaches: {}", where(),
                                   describe(c), e.what()));
    }
    return;
  }
  ProcessGroup::check_supported(c);
}

std::uint64_t ThreadsProcessGroup::take_ticket() {
  std::lock_guard lock(turn_mutex_);
  return next_ticket_++;
}

void ThreadsProcessGroup::run_at_turn(std::uint64_t ticket, const Collective& c,
                                      const Stream* stream) {
  {
    std::unique_lock lock(turn_mutex_);
    turn_cv_.wait(lock, [&] { return serving_ == ticket; });
  }
  struct Next {  // the next ticket's turn comes whether this one succeeded or threw
    ThreadsProcessGroup* self;
    ~Next() {
      // Notified under the lock: the destructor, waiting for the last ticket, may destroy the
      // condition variable as soon as it can take the lock (a notify after unlocking would race
      // with that destruction).
      std::lock_guard lock(self->turn_mutex_);
      ++self->serving_;
      self->turn_cv_.notify_all();
    }
  } next{this};
  exchange(c, stream);
}

Event ThreadsProcessGroup::launch_on_stream(const Collective& c) {
  const std::uint64_t ticket = take_ticket();
  const bool queued_by_host = !launched_work_reaches(c.device);
  if (queued_by_host) {
    // One item for the stream sanitizer, this rank's buffers its accesses (the peers' buffers
    // are their own ranks' accesses): the copies and kernels it queues report nothing more.
    if (stream_sanitizer::enabled() && c.bytes() > 0)
      stream_sanitizer::on_work(c.stream, collective_name(c.kind).data(),
                                own_accesses(c, size(), rank()));
    const stream_sanitizer::WithinWork whole;
    run_at_turn(ticket, c, &c.stream);  // the host queues the device's copies and kernels
  } else {
    launch(c.stream, [this, c, ticket] {
      Collective h = c;  // the same buffers, as this stream's work reaches them
      h.input = launched_address(c.device, c.input, "the threads backend");
      h.output = launched_address(c.device, c.output, "the threads backend");
      run_at_turn(ticket, h, nullptr);
    });
  }
  if (stream_sanitizer::enabled() && c.bytes() > 0 && !queued_by_host)
    stream_sanitizer::on_accesses(c.stream, collective_name(c.kind).data(),
                                  own_accesses(c, size(), rank()));
  Event done(c.stream.device);
  done.record(c.stream);
  return done;
}

std::shared_ptr<Work> ThreadsProcessGroup::execute_async(const Collective& c) {
  if (c.device.is_accelerator()) return std::make_shared<StreamWork>(launch_on_stream(c));
  const std::uint64_t ticket = take_ticket();
  return submit_ordered([this, c, ticket] { run_at_turn(ticket, c, nullptr); });
}

void ThreadsProcessGroup::execute(const Collective& c) {
  // Synchronous on an accelerator means stream-ordered (torch's NCCL collectives without
  // async_op): queued, the host does not wait.
  if (c.device.is_accelerator()) {
    launch_on_stream(c);
    return;
  }
  run_at_turn(take_ticket(), c, nullptr);
}

void ThreadsProcessGroup::exchange(const Collective& c, const Stream* stream) {
  const int n = size(), me = rank();
  const Mover move{c, stream};
  ThreadsWorld& w = *world_;
  auto& slot = w.slot(me);
  slot.input = c.input;
  slot.output = c.output;
  slot.signature = CollectiveSignature::of(c);
  if (stream) slot.ready.record(*stream);  // this rank's buffers, as its stream's work leaves them
  sync(c);                                 // every rank's slot is published
  check_signatures(c);
  if (stream)
    for (int r = 0; r < n; ++r)
      if (r != me) stream->wait_event(w.slot(r).ready);

  const std::size_t elem = dtype_size(c.dtype);
  const std::size_t bytes = c.count * elem;
  switch (c.kind) {
    case CollectiveKind::Barrier:
      break;  // the closing sync still guards the slots
    case CollectiveKind::AllGather:
      // Pull every rank's input into our output, starting with our right neighbour so that the
      // ranks do not all read the same source at once.
      for (int k = 0; k < n && bytes > 0; ++k) {
        int src = (me + k) % n;
        const void* from = w.slot(src).input;
        move.copy(at(c.output, std::size_t(src) * bytes), from, bytes);
      }
      break;
    case CollectiveKind::ReduceScatter: {
      std::vector<const void*> inputs(static_cast<std::size_t>(n));
      for (int r = 0; r < n; ++r)
        inputs[std::size_t(r)] = at(w.slot(r).input, std::size_t(me) * bytes);
      move.reduce(c.output, inputs.data(), n, c.count);
      break;
    }
    case CollectiveKind::AllReduce: {
      // Reduce our share of every rank's buffer and write the result into all of them: nobody
      // else reads or writes this share. On the host in cache-sized blocks; a stream takes the
      // share at once (one kernel and a copy per peer).
      auto [begin, end] = share_of(c.count, n, me);
      std::vector<const void*> inputs(static_cast<std::size_t>(n));
      const std::size_t block = stream ? std::max<std::size_t>(1, end - begin)
                                       : std::max<std::size_t>(1, (64u << 10) / elem);
      for (std::size_t b = begin; b < end; b += block) {
        std::size_t len = std::min(block, end - b);
        for (int r = 0; r < n; ++r) inputs[std::size_t(r)] = at(w.slot(r).output, b * elem);
        move.reduce(at(c.output, b * elem), inputs.data(), n, len);
        for (int r = 0; r < n; ++r)
          if (r != me)
            move.copy(at(w.slot(r).output, b * elem), at(c.output, b * elem), len * elem);
      }
      break;
    }
    case CollectiveKind::Broadcast:
      if (me != c.root) move.copy(c.output, w.slot(c.root).output, bytes);
      break;
  }
  if (stream) slot.done.record(*stream);
  sync(c);  // nobody returns (and reuses its buffers) while another rank still reads them
  // On a stream the host returning is not enough: this stream's later work waits for the peers'
  // reads and writes of this rank's buffers.
  if (stream)
    for (int r = 0; r < n; ++r)
      if (r != me) stream->wait_event(w.slot(r).done);
}

std::shared_ptr<ProcessGroup> ThreadsProcessGroup::make_subgroup(const std::vector<int>& ranks,
                                                                 int new_rank, int call_index) {
  if (new_rank < 0) return nullptr;
  return std::make_shared<ThreadsProcessGroup>(new_rank, world_->subworld(call_index, ranks));
}

void register_threads_backend() {
  register_backend("threads", [](const InitOptions& o) -> std::shared_ptr<ProcessGroup> {
    int size = o.world_size < 0 ? 1 : o.world_size;
    int rank = o.rank < 0 ? 0 : o.rank;
    if (size == 1)
      return std::make_shared<ThreadsProcessGroup>(0, std::make_shared<ThreadsWorld>(1, o.timeout));
    if (rank >= size)
      throw ValueError(
          fmt::format("threads backend: rank {} is not below world size {}", rank, size));
    return std::make_shared<ThreadsProcessGroup>(
        rank, join_named_world(o.group_name, rank, size, o.timeout));
  });
}

}  // namespace fsdp::comm
