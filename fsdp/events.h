// What the runtime reports, as values: the schedule (each unshard, reshard and gradient
// reduction of a unit, recorded in order, so tests assert the schedule and errors can print it)
// and the bytes its collectives moved.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fsdp {

struct RuntimeEvent {
  enum class Kind { Unshard, Prefetch, Reshard, ReduceGrad };
  Kind kind;
  std::string unit;         // the unit's FQN from the root ("" for the root, "blocks.0", ...)
  std::string str() const;  // "Unshard(blocks.0)", "Prefetch(blocks.1)", ...
  friend bool operator==(const RuntimeEvent&, const RuntimeEvent&) = default;
};

const char* to_string(RuntimeEvent::Kind kind);
// "Unshard(), Unshard(blocks.0), Reshard(blocks.0), ..."
std::string to_string(const std::vector<RuntimeEvent>& events);

// Bytes moved by the unit collectives of one rank (what it receives into the unsharded buffer for
// an all-gather, what it contributes for a reduction).
struct CommBytes {
  std::uint64_t all_gather = 0;
  std::uint64_t reduce_scatter = 0;
  std::uint64_t all_reduce = 0;
};

}  // namespace fsdp
