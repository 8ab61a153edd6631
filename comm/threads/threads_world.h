// Internal: the state shared by the ranks (threads) of one threads-backend group: one slot per
// rank where it publishes its buffers, a barrier with timeout and abort, and the group's
// subgroups.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "comm/collective.h"
#include "core/stream.h"

namespace fsdp::comm {

class ThreadsWorld {
 public:
  ThreadsWorld(int size, std::chrono::milliseconds timeout);

  struct alignas(64) Slot {
    const void* input = nullptr;
    void* output = nullptr;
    CollectiveSignature signature;
    // Collectives queued on a device's streams by the host (CUDA): the point of this rank's
    // stream where its buffers are ready (published with the pointers, before the first barrier),
    // and where its reads and writes of the peers' buffers end (written between the barriers,
    // read after the second: the next collective rewrites it only after every rank passed its
    // first barrier).
    Event ready;
    Event done;
  };

  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  Slot& slot(int rank) { return slots_[std::size_t(rank)]; }

  // Returns when every rank reached this barrier; throws CommTimeoutError (naming the ranks that
  // did not arrive) after timeout(), CommAbortedError when a rank failed or returned early.
  // `where` and `what` only feed the error message.
  void arrive_and_wait(int rank, const std::string& where, const std::string& what);

  // A rank failed: every waiting and future arrive_and_wait throws, here and in subgroups.
  void abort(int failed_rank, const std::string& reason);
  // A rank's thread finished: ranks waiting for it fail at once instead of timing out, here and
  // in the subgroups it belongs to (those made later included).
  void mark_exited(int rank);
  // Marks `rank` as having joined (named worlds); false when it had already joined.
  bool claim_rank(int rank);

  // The world of new_group call `call_index` with `ranks` (created by the first rank to ask).
  std::shared_ptr<ThreadsWorld> subworld(int call_index, const std::vector<int>& ranks);

 private:
  void throw_if_aborted_locked(const std::string& where, const std::string& what) const;
  std::vector<int> missing_locked(int rank) const;

  const int size_;
  const std::chrono::milliseconds timeout_;
  std::vector<Slot> slots_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> aborted_flag_{false};
  int arrived_ = 0;
  std::vector<std::uint64_t> arrivals_;  // barriers entered, per rank
  std::vector<char> exited_;
  std::vector<char> claimed_;
  bool aborted_ = false;
  std::string abort_reason_;

  std::map<std::pair<int, std::vector<int>>, std::shared_ptr<ThreadsWorld>> subworlds_;
};

// Named worlds for create_process_group("threads", {rank, world_size, group_name}): each rank
// thread joins by name. Throws when sizes disagree or a rank joins twice.
std::shared_ptr<ThreadsWorld> join_named_world(const std::string& name, int rank, int size,
                                               std::chrono::milliseconds timeout);

}  // namespace fsdp::comm
