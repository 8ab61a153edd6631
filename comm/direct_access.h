// The same-host data path of the MPI and Gloo backends (internal to comm/). When every rank of
// a group runs on one host and may read the others' memory (Linux cross-memory attach:
// process_vm_readv), all_gather, reduce_scatter and all_reduce send only small descriptors
// through the backend's own transport: each rank reads what it needs straight from its peers'
// buffers, and finally tells them it is done reading, so that they may return and reuse them.
//
// Why: between 2 ranks on one host, an 8 MiB exchange took 2.5 ms through Open MPI's
// shared-memory transport while one process_vm_readv of the same bytes takes 0.85 ms; through
// gloo's TCP loopback, the kernel copies each byte twice and charges both ranks' CPUs for it
// (+24 ms of CPU per rank per training step of the issue-10 GPT, on cores the compute needs).
// The small messages go through mailboxes in the ranks' memory too (see Mailbox): a message
// through gloo waits for its network thread to be scheduled, milliseconds on a busy host.
// A reduction reads its inputs in pieces small enough to stay in the cache together, and
// reduces each piece as soon as it is read, so nothing is staged in main memory.
//
//   all_gather:     read every peer's input into its place in the output
//   reduce_scatter: for each piece of this rank's chunk, read it from every peer and reduce
//                   (ranks in rank order, the same kernel as every CPU backend)
//   all_reduce:     reduce this rank's share in place (as reduce_scatter), tell the peers it is
//                   ready, read their reduced shares into place
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/collective.h"

namespace fsdp::comm::direct {

// Below this many bytes per rank, the transport's own messages are faster than a descriptor
// round trip.
constexpr std::size_t kMinBytes = std::size_t(16) << 10;

// Where a rank's peers write the small messages of the direct path (descriptors, "done"): one
// 64-byte slot per sender, used by turns (two of them). A sender writes the payload and then the
// slot's sequence number with process_vm_writev; the owner spins on its own memory, as MPI's
// shared-memory transport does, instead of waiting for a network thread to wake it.
struct Mailbox;

// What a rank publishes when a group is made, so that its peers can check they can read it.
struct ProbeWord {
  std::int64_t pid;
  std::uint64_t address;  // the probe word
  std::uint64_t mailbox;  // this rank's Mailbox
};

// This rank's probe word, alive while the peers read it (until every rank has said whether it
// could read every other: the backend's closing exchange of the probe), and its mailbox.
class Probe {
 public:
  Probe(int rank, int size);
  ~Probe();
  ProbeWord mine() const;
  // Whether this process reads every other rank's word back as that rank wrote it: the peer
  // runs on this host, is the process it says, and lets us read it (ptrace rights).
  bool can_read_all(const std::vector<ProbeWord>& all, int rank) const;
  std::shared_ptr<Mailbox> mailbox() const { return mailbox_; }

 private:
  int rank_;
  std::unique_ptr<std::uint64_t> word_;
  std::shared_ptr<Mailbox> mailbox_;
};

// What the direct path needs from a backend for one collective.
struct Transport {
  // Throws CommMismatchError when a peer's call differs from this rank's (theirs[rank] unused).
  std::function<void(const CollectiveSignature& mine,
                     const std::vector<CollectiveSignature>& theirs)>
      require_matching;
  // Marks the group broken and throws CommError (CommTimeoutError if `timed_out`) with `reason`.
  std::function<void(const std::string& reason, bool timed_out)> fail;
  std::string where;  // the group, for messages
  // Ranks of the group for a message (ProcessGroup::name_ranks: world ranks in a subgroup).
  std::function<std::string(const std::vector<int>&)> name_ranks;
  std::chrono::milliseconds timeout{0};
};

class Path {
 public:
  Path() = default;
  // From a probe every rank passed: every rank's word, and this rank's mailbox.
  Path(std::vector<ProbeWord> all, std::shared_ptr<Mailbox> mailbox);

  bool on() const { return !peers_.empty(); }
  // With the path on: all_gather, reduce_scatter or all_reduce of at least kMinBytes per
  // rank, an all_reduce of at most 40 bytes, a barrier.
  bool eligible(const Collective& c) const;
  // Runs `c` (signatures always checked) as rank `rank` of the group.
  void run(const Collective& c, int rank, const Transport& t);
  // "<backend>: direct reads of peer memory (process_vm_readv) from 16 KiB per rank, <rest>"
  static std::string describe(const std::string& backend, const std::string& below);

 private:
  // Sends `bytes` (at most a slot's payload) at `mine` to every peer's mailbox and waits for
  // every peer's into theirs + peer * bytes; `phase` names the exchange in errors.
  void exchange(const void* mine, void* theirs, std::size_t bytes, const char* phase, int rank,
                const Collective& c, const Transport& t);
  // A barrier or small all_reduce: one exchange of the signature and the data.
  void run_small(const Collective& c, int rank, const Transport& t);
  void read_peer(int peer, std::uint64_t remote, void* local, std::size_t bytes,
                 const Collective& c, const Transport& t);

  std::vector<ProbeWord> peers_;
  std::shared_ptr<Mailbox> mailbox_;
  std::uint64_t sequence_ = 0;  // exchanges so far: every rank makes the same ones
  std::vector<char> pieces_;    // persistent landing buffer for pieces read from peers
};

}  // namespace fsdp::comm::direct
