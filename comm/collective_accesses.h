// What a collective queued on a stream does to one rank's device memory, for the stream sanitizer
// (core/stream_sanitizer.h): the threads backend and NCCL report it for the collectives they queue.
#pragma once

#include <vector>

#include "comm/collective.h"
#include "core/stream_sanitizer.h"

namespace fsdp::comm {

// Rank `rank`'s (of `size`) buffers as collective `c` reads and writes them; the peers' buffers
// are their own ranks' accesses, ordered by the collective.
std::vector<stream_sanitizer::Access> own_accesses(const Collective& c, int size, int rank);

}  // namespace fsdp::comm
