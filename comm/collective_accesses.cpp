#include "comm/collective_accesses.h"

namespace fsdp::comm {

std::vector<stream_sanitizer::Access> own_accesses(const Collective& c, int size, int rank) {
  const std::size_t bytes = c.bytes(), all = bytes * std::size_t(size);
  switch (c.kind) {
    case CollectiveKind::AllGather:
      return {{c.input, bytes, false}, {c.output, all, true}};
    case CollectiveKind::ReduceScatter:
      return {{c.input, all, false}, {c.output, bytes, true}};
    case CollectiveKind::AllReduce:
      return {{c.output, bytes, true}};
    case CollectiveKind::Broadcast:
      return {{c.output, bytes, rank != c.root}};
    case CollectiveKind::Barrier:
      break;
  }
  return {};
}

}  // namespace fsdp::comm
