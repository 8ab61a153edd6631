#include "comm/collective.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace fsdp::comm {

std::string describe(const Collective& c) {
  switch (c.kind) {
    case CollectiveKind::Barrier:
      return "barrier()";
    case CollectiveKind::Broadcast:
      return fmt::format("broadcast(count={}, dtype={}, root={}, device={})", c.count,
                         dtype_name(c.dtype), c.root, c.device.str());
    case CollectiveKind::AllGather:
      return fmt::format("all_gather(count={} per rank, dtype={}, device={})", c.count,
                         dtype_name(c.dtype), c.device.str());
    case CollectiveKind::ReduceScatter:
    case CollectiveKind::AllReduce:
      return fmt::format("{}(count={}, dtype={}, op={}, device={})", collective_name(c.kind),
                         c.count, dtype_name(c.dtype), reduce_op_name(c.op), c.device.str());
  }
  return "?";
}

CollectiveSignature CollectiveSignature::of(const Collective& c) {
  CollectiveSignature s;
  s.count = c.count;
  s.kind = static_cast<std::uint8_t>(c.kind);
  s.dtype = static_cast<std::uint8_t>(c.dtype);
  s.op = c.has_op() ? static_cast<std::uint8_t>(c.op) : 0;
  s.root = c.kind == CollectiveKind::Broadcast ? c.root : 0;
  return s;
}

std::string CollectiveSignature::str() const {
  Collective c;
  c.kind = static_cast<CollectiveKind>(kind);
  c.count = count;
  c.dtype = static_cast<DType>(dtype);
  c.op = static_cast<ReduceOp>(op);
  c.root = root;
  return describe(c);
}

std::pair<std::size_t, std::size_t> share_of(std::size_t count, int parts, int r) {
  const std::size_t base = count / std::size_t(parts), extra = count % std::size_t(parts);
  const std::size_t begin = std::size_t(r) * base + std::min<std::size_t>(std::size_t(r), extra);
  return {begin, begin + base + (std::size_t(r) < extra ? 1 : 0)};
}

void run_single_rank(const Collective& c) {
  if (c.bytes() == 0 || c.input == c.output) return;
  if (c.kind == CollectiveKind::AllGather || c.kind == CollectiveKind::ReduceScatter)
    std::memmove(c.output, c.input, c.bytes());
}

}  // namespace fsdp::comm
