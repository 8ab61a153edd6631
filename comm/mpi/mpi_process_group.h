// Internal to comm/mpi: the MPI process group, shared by its two data paths
// (mpi_process_group.cpp: point-to-point messages; direct_access.cpp: reading peers' memory).
#pragma once

#include <mpi.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "comm/algorithms/peer_link.h"
#include "comm/collective.h"
#include "comm/direct_access.h"
#include "comm/init_options.h"
#include "comm/process_group.h"

namespace fsdp::comm {

[[noreturn]] void throw_mpi_error(int rc, const char* call, const std::string& where,
                                  const char* file, int line);

// Checks an MPI return code; the message names the call, the group and the MPI error string.
#define FSDP_MPI_CHECK(call, where)                                                    \
  do {                                                                                 \
    int fsdp_mpi_rc_ = (call);                                                         \
    if (fsdp_mpi_rc_ != MPI_SUCCESS)                                                   \
      ::fsdp::comm::throw_mpi_error(fsdp_mpi_rc_, #call, (where), __FILE__, __LINE__); \
  } while (0)

namespace mpi {

// One lock for every MPI call of this process: correct at any MPI thread level >= SERIALIZED,
// and progress loops release it between polls so groups used from different threads interleave.
std::mutex& mpi_mutex();

// Whether every rank of `comm` runs on this host and can read the others' memory with
// process_vm_readv (Linux cross-memory attach); collective over `comm`. FSDP_MPI_DIRECT=0 turns
// it off. Sets `path` on when true, off otherwise.
bool probe_direct_access(MPI_Comm comm, direct::Path& path);

class MpiProcessGroup final : public ProcessGroup {
 public:
  // `direct`: the same-host path (probe_direct_access), on or off.
  MpiProcessGroup(MPI_Comm comm, int rank, int size, const InitOptions& options,
                  direct::Path direct);
  ~MpiProcessGroup() override;

  std::string backend_name() const override { return "mpi"; }
  std::string transport() const override;

 protected:
  void execute(const Collective& c) override;
  std::shared_ptr<ProcessGroup> make_subgroup(const std::vector<int>& ranks, int new_rank,
                                              int call_index) override;

 private:
  // Outstanding requests of one round and the peer each one talks to.
  struct Pending {
    std::vector<MPI_Request> requests;
    std::vector<int> peers;
    std::vector<std::size_t> expected_bytes;  // receives only; SIZE_MAX for sends
  };

  // The message path's PeerLink (comm/algorithms): Isend/Irecv, progressed by wait_all; each
  // round of a collective has its own tag.
  class Link final : public algorithms::PeerLink {
   public:
    explicit Link(MpiProcessGroup& group) : group_(group) {}
    // Begins a collective whose round i uses tag + i (at most 4 rounds); requests left by a
    // collective that failed before its wait are dropped.
    void start(int tag);

    int rank() const override { return group_.rank(); }
    int size() const override { return group_.size(); }
    void post_send(const void* data, std::size_t bytes, int peer) override;
    void post_recv(void* data, std::size_t bytes, int peer) override;
    void wait(const Collective& c, const char* phase) override;
    char* scratch(std::size_t bytes) override;

   private:
    MpiProcessGroup& group_;
    Pending pending_;
    int tag_ = 0;
    std::vector<char> scratch_;  // persistent: grown, pre-touched, never shrunk
  };

  void post(Pending& p, bool send, const void* buf, std::size_t bytes, int peer, int tag);
  // Progresses p until done; past the timeout from now the group breaks and a CommTimeoutError
  // names the peers that never answered.
  void wait_all(Pending& p, const Collective& c, const char* phase);
  // Breaks the group, throws CommError (CommTimeoutError when `timed_out`).
  [[noreturn]] void fail(const std::string& reason, bool timed_out = false);
  // An MPI call of collective c failed (`rc`: its error code; `phase`: null while posting):
  // breaks the group, naming the collective, the phase and the ranks it exchanges with.
  [[noreturn]] void transport_failed(int rc, const char* call, const Collective& c,
                                     const char* phase, const std::vector<int>& peers);
  // Broadcast (MPI_Ibcast) and barrier (MPI_Ibarrier), progressed by wait_all.
  void broadcast_or_barrier(const Collective& c);

  // --- direct path (direct_access.cpp): ranks on one host read each other's buffers with
  // process_vm_readv instead of sending them through MPI (comm/direct_access.h).
  void direct_collective(const Collective& c);

  MPI_Comm comm_;
  InitOptions options_;
  std::uint64_t sequence_ = 0;
  const Collective* current_ = nullptr;  // the collective in progress, for post()'s errors
  // Its deadline (its start + the timeout): every wait of it ends by then.
  std::chrono::steady_clock::time_point deadline_;
  bool broken_ = false;
  std::string broken_reason_;
  Link link_{*this};
  direct::Path direct_;  // on when every rank can read the others' memory
};

}  // namespace mpi
}  // namespace fsdp::comm
