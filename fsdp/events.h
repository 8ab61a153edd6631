// The runtime's schedule as values: each unshard, reshard and gradient reduction of a unit is
// recorded in order, so tests assert the schedule and errors can print it.
#pragma once

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

}  // namespace fsdp
