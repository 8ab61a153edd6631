// Pairwise collectives over a PeerLink: in each round every rank exchanges directly with every
// peer, posting all transfers at once and then waiting for them together. Messages go straight
// into their final place (or the link's persistent scratch), and reductions combine ranks in
// rank order through reduce_buffers, so results are bit-identical to the threads backend.
//
//   all_gather:     every rank sends its input to every peer, straight into their outputs
//   reduce_scatter: chunk p goes to rank p into scratch, then one local reduction over ranks
//   all_reduce:     up to `single_exchange_max_bytes`, whole buffers in one exchange and every
//                   rank reduces all copies; above it, reduce_scatter of near-equal shares
//                   (share_of) in place, then all_gather of the reduced shares
//   broadcast:      the root sends to every peer
//
// Callers handle a group of one rank (run_single_rank) before these.
#pragma once

#include <cstddef>

#include "comm/algorithms/peer_link.h"
#include "comm/collective.h"

namespace fsdp::comm::algorithms {

// Sends `bytes` at `mine` to every peer and receives peer p's into theirs + p * bytes; mine is
// copied to theirs + rank * bytes unless it is already there. `c` and `phase` name the round in
// errors (the collective this exchange serves, which may be another than a gather of bytes).
void gather_bytes(PeerLink& link, const Collective& c, const char* phase, const void* mine,
                  void* theirs, std::size_t bytes);

void all_gather(PeerLink& link, const Collective& c);
void reduce_scatter(PeerLink& link, const Collective& c);
void all_reduce(PeerLink& link, const Collective& c, std::size_t single_exchange_max_bytes);
void broadcast(PeerLink& link, const Collective& c);

// The one of the above that c's kind names (a barrier moves nothing: check_signatures, a round
// of its own, is one).
void run(PeerLink& link, const Collective& c, std::size_t single_exchange_max_bytes);

}  // namespace fsdp::comm::algorithms
