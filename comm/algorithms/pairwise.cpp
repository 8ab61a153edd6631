#include "comm/algorithms/pairwise.h"

#include <cstring>
#include <vector>

#include "comm/reduce_kernels.h"

namespace fsdp::comm::algorithms {

namespace {

struct Landing {  // where a receive from one peer goes
  void* data;
  std::size_t bytes;
};
struct Outgoing {  // what a send to one peer reads
  const void* data;
  std::size_t bytes;
};

// Posts one round of the pairwise exchange: recv_from(peer) -> Landing, send_to(peer) ->
// Outgoing. At step k a rank receives from the rank k below it and sends to the rank k above:
// the peer order is staggered, so that no rank is everyone's first peer.
template <class RecvFrom, class SendTo>
void post_round(PeerLink& link, RecvFrom recv_from, SendTo send_to) {
  const int n = link.size(), me = link.rank();
  for (int k = 1; k < n; ++k) {
    const int from = (me - k + n) % n, to = (me + k) % n;
    const Landing in = recv_from(from);
    link.post_recv(in.data, in.bytes, from);
    const Outgoing out = send_to(to);
    link.post_send(out.data, out.bytes, to);
  }
}

// Receives `bytes` from every peer into the link's scratch (peer p's at p * bytes) while sending
// send_to(peer) to each; returns the scratch.
template <class SendTo>
const char* gather_into_scratch(PeerLink& link, const Collective& c, const char* phase,
                                std::size_t bytes, SendTo send_to) {
  char* stage = link.scratch(bytes * std::size_t(link.size()));
  auto into_stage = [&](int from) { return Landing{stage + std::size_t(from) * bytes, bytes}; };
  post_round(link, into_stage, send_to);
  link.wait(c, phase);
  return stage;
}

// Reduces the ranks' copies into out (which may alias own), in rank order: this rank's at own,
// rank r's at stage + r * stride.
void reduce_staged(const Collective& c, int me, int n, void* out, const char* own,
                   const char* stage, std::size_t stride, std::size_t count) {
  std::vector<const void*> inputs(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r)
    inputs[std::size_t(r)] = r == me ? own : stage + std::size_t(r) * stride;
  reduce_buffers(c.op, c.dtype, out, inputs.data(), n, count, n);
}

}  // namespace

void gather_bytes(PeerLink& link, const Collective& c, const char* phase, const void* mine,
                  void* theirs, std::size_t bytes) {
  char* all = static_cast<char*>(theirs);
  char* own = all + std::size_t(link.rank()) * bytes;
  auto into_place = [&](int from) { return Landing{all + std::size_t(from) * bytes, bytes}; };
  post_round(link, into_place, [&](int) { return Outgoing{mine, bytes}; });
  // The local copy overlaps the transfers: both only read `mine`.
  if (mine != own && bytes > 0) std::memcpy(own, mine, bytes);
  link.wait(c, phase);
}

void all_gather(PeerLink& link, const Collective& c) {
  gather_bytes(link, c, "exchange", c.input, c.output, c.bytes());
}

void reduce_scatter(PeerLink& link, const Collective& c) {
  const std::size_t bytes = c.bytes();
  const char* in = static_cast<const char*>(c.input);
  const char* stage = gather_into_scratch(link, c, "exchange", bytes, [&](int to) {
    return Outgoing{in + std::size_t(to) * bytes, bytes};
  });
  const int me = link.rank();
  reduce_staged(c, me, link.size(), c.output, in + std::size_t(me) * bytes, stage, bytes, c.count);
}

void all_reduce(PeerLink& link, const Collective& c, std::size_t single_exchange_max_bytes) {
  const int n = link.size(), me = link.rank();
  char* data = static_cast<char*>(c.output);
  if (c.bytes() <= single_exchange_max_bytes) {
    // Half the latency of the two phases for scalars and small vectors (losses, norms), with
    // the same result: every rank reduces all n copies in rank order.
    const std::size_t bytes = c.bytes();
    const char* stage = gather_into_scratch(link, c, "exchange", bytes, [&](int) {
      return Outgoing{data, bytes};
    });
    return reduce_staged(c, me, n, data, data, stage, bytes, c.count);
  }
  const std::size_t elem = dtype_size(c.dtype);
  // Rank r's share of the data: near-equal runs of elements (share_of).
  auto share = [&](int r) {
    auto [begin, end] = share_of(c.count, n, r);
    return Landing{data + begin * elem, (end - begin) * elem};
  };
  const Landing mine = share(me);
  char* own = static_cast<char*>(mine.data);
  // Phase 1: share p of our data to rank p; every rank's copy of our share into scratch.
  const char* stage = gather_into_scratch(link, c, "reduce-scatter phase", mine.bytes, [&](int to) {
    const Landing theirs = share(to);
    return Outgoing{theirs.data, theirs.bytes};
  });
  reduce_staged(c, me, n, own, own, stage, mine.bytes, mine.bytes / elem);
  // Phase 2: all-gather the reduced shares in place.
  post_round(link, share, [&](int) { return Outgoing{own, mine.bytes}; });
  link.wait(c, "all-gather phase");
}

void broadcast(PeerLink& link, const Collective& c) {
  if (link.rank() == c.root) {
    for (int peer = 0; peer < link.size(); ++peer)
      if (peer != c.root) link.post_send(c.output, c.bytes(), peer);
  } else {
    link.post_recv(c.output, c.bytes(), c.root);
  }
  link.wait(c, "exchange");
}

void run(PeerLink& link, const Collective& c, std::size_t single_exchange_max_bytes) {
  switch (c.kind) {
    case CollectiveKind::AllGather:
      return all_gather(link, c);
    case CollectiveKind::ReduceScatter:
      return reduce_scatter(link, c);
    case CollectiveKind::AllReduce:
      return all_reduce(link, c, single_exchange_max_bytes);
    case CollectiveKind::Broadcast:
      return broadcast(link, c);
    case CollectiveKind::Barrier:
      return;  // nothing to move: a signature check is the barrier
  }
}

}  // namespace fsdp::comm::algorithms
