#include "comm/algorithms/signature_check.h"

#include <fmt/format.h>

#include "comm/algorithms/pairwise.h"
#include "comm/errors.h"

namespace fsdp::comm::algorithms {

void require_matching(const std::string& where, int rank, const CollectiveSignature& mine,
                      const std::vector<CollectiveSignature>& theirs) {
  for (std::size_t peer = 0; peer < theirs.size(); ++peer)
    if (int(peer) != rank && !(theirs[peer] == mine))
      throw CommMismatchError(
          fmt::format("{}: mismatched collectives: this rank called {}, rank {} called {}", where,
                      mine.str(), peer, theirs[peer].str()));
}

void check_signatures(PeerLink& link, const Collective& c, const std::string& where) {
  const CollectiveSignature mine = CollectiveSignature::of(c);
  std::vector<CollectiveSignature> theirs(static_cast<std::size_t>(link.size()));
  gather_bytes(link, c, "signature exchange", &mine, theirs.data(), sizeof mine);
  require_matching(where, link.rank(), mine, theirs);
}

}  // namespace fsdp::comm::algorithms
