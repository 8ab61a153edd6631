// The mismatch check: before moving data, ranks exchange their calls' signatures
// (CollectiveSignature), so that ranks calling different collectives, counts, dtypes, ops or
// roots get an error naming both calls instead of corrupted data or a hang.
#pragma once

#include <string>
#include <vector>

#include "comm/algorithms/peer_link.h"
#include "comm/collective.h"

namespace fsdp::comm::algorithms {

// Throws CommMismatchError when some peer's call differs from this rank's (theirs[rank] unused):
// "<where>: mismatched collectives: this rank called <mine>, rank <p> called <theirs>".
void require_matching(const std::string& where, int rank, const CollectiveSignature& mine,
                      const std::vector<CollectiveSignature>& theirs);

// Exchanges c's signature with every peer over `link` (a round of its own, which doubles as a
// barrier) and throws as require_matching does.
void check_signatures(PeerLink& link, const Collective& c, const std::string& where);

}  // namespace fsdp::comm::algorithms
