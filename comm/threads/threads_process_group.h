// Internal: one rank of a threads-backend group. Collectives exchange buffer pointers through
// the shared ThreadsWorld and copy/reduce directly between the ranks' buffers: each rank moves its
// own share of the data, with two barriers per collective and no staging copies.
//
// Accelerator buffers: the collective is ordered on its stream, as an NCCL kernel is, and the
// host never touches device memory. One protocol (exchange) serves every device; what moves the
// bytes differs:
// - fake_cuda (launched host code reaches its memory): the collective is host work queued on
//   the stream, moving the data through the addresses launched work reaches the memory by
//   (core/device_copy.h's launched_address), as on the cpu.
// - CUDA (it cannot): the rendezvous runs on the issuing thread; each rank records an event on
//   its stream where its buffers are ready, waits on its peers' (cudaStreamWaitEvent), queues
//   device-to-device copies and the device's reduce kernel (DeviceCopyFunctions::reduce) on its
//   stream, and waits on its peers' end events, so no buffer is reused while a peer reads it.
//   No host synchronisation with the device.
// Every collective takes a ticket when issued and runs at its turn, so that those on several
// streams (FSDP's unshard and post-backward streams) and on the host meet their peers' in issue
// order. The stream sanitizer (core/stream_sanitizer.h) is told what each one does to this
// rank's buffers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "comm/threads/threads_world.h"

namespace fsdp::comm {

class ThreadsProcessGroup final : public ProcessGroup {
 public:
  ThreadsProcessGroup(int rank, std::shared_ptr<ThreadsWorld> world);
  ~ThreadsProcessGroup() override;
  std::string backend_name() const override { return "threads"; }

  ThreadsWorld& world() { return *world_; }

 protected:
  void execute(const Collective& c) override;
  std::shared_ptr<Work> execute_async(const Collective& c) override;
  void check_supported(const Collective& c) const override;
  std::shared_ptr<ProcessGroup> make_subgroup(const std::vector<int>& ranks, int new_rank,
                                              int call_index) override;

 private:
  void sync(const Collective& c);
  void check_signatures(const Collective& c);
  // The protocol, at this collective's turn: the data moved on the host (host-addressable
  // buffers) when `stream` is null, else queued on *stream by the device's copy and reduce.
  void exchange(const Collective& c, const Stream* stream);
  // Orders c on its stream (queued as host work, or queued by the host at its turn); the event
  // after it is c's completion.
  Event launch_on_stream(const Collective& c);
  std::uint64_t take_ticket();
  void run_at_turn(std::uint64_t ticket, const Collective& c, const Stream* stream);

  std::shared_ptr<ThreadsWorld> world_;
  std::mutex turn_mutex_;
  std::condition_variable turn_cv_;
  std::uint64_t next_ticket_ = 0;  // issued
  std::uint64_t serving_ = 0;      // the ticket whose collective may run now
};

}  // namespace fsdp::comm
