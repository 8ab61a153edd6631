// PeerLink: the point-to-point transfers that the collective algorithms of comm/algorithms need
// from a transport (gloo's transport/unbound_buffer.h plays this part in gloo). The MPI backend
// implements it with Isend/Irecv, the Gloo backend with gloo's unbound buffers; each algorithm
// is then written once, over this interface.
//
// Transfers posted between two waits form one round; wait() completes the round. Every rank of
// a group must run the same rounds in the same order (the transports match a round's messages by
// their position: MPI by tag, gloo by slot).
#pragma once

#include <cstddef>

#include "comm/collective.h"

namespace fsdp::comm::algorithms {

class PeerLink {
 public:
  virtual ~PeerLink() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Starts sending `bytes` at `data` to `peer`; `data` must stay unchanged until wait() returns.
  virtual void post_send(const void* data, std::size_t bytes, int peer) = 0;
  // Starts receiving exactly `bytes` from `peer` into `data`.
  virtual void post_recv(void* data, std::size_t bytes, int peer) = 0;
  // Completes the round by the collective's deadline (its start + the group's timeout). A failure
  // (timeout, a peer that died, a byte count that differs from the sender's) throws a CommError
  // that names `c`, `phase` and the ranks not heard from; a transport may mark its group broken
  // first.
  virtual void wait(const Collective& c, const char* phase) = 0;

  // A persistent scratch buffer of at least `bytes`, owned by the link: grown (contents lost),
  // never shrunk, so that steady-state collectives allocate nothing and touch no new pages.
  virtual char* scratch(std::size_t bytes) = 0;
};

}  // namespace fsdp::comm::algorithms
