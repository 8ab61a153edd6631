// FULL_STATE_DICT, minimal: the unsharded parameters and buffers under the unwrapped model's
// FQNs, gathered unit by unit (one unit's unsharded parameters alive at a time), and the
// inverse, which copies each rank's part of full values into its shards (no communication).
// Tied parameters appear once, under their first FQN. Parameters no unit manages (an ignored
// module's) are in it whole, as upstream's.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "fsdp/attribute_forwarding.h"
#include "fsdp/fully_sharded_data_parallel.h"

namespace fsdp {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Every rank of the root's groups must call it. With rank0_only, ranks other than 0 get an
// empty list (they still take part in the all-gathers).
NamedTensors full_state_dict(FullyShardedDataParallel& root, bool rank0_only = true);

// One entry of the full state dict: its FQN, dtype and shape.
struct FullEntry {
  std::string name;
  DType dtype;
  Shape shape;
};

// full_state_dict without the copy: on the ranks that keep it (rank 0 with rank0_only), `begin`
// receives every entry in state-dict order (parameters, unmanaged parameters, then buffers), then
// `each(k, value)` entry k's value as its unit is gathered (a view, valid during the call only: one
// unit is unsharded at a time). Every rank of the root's groups must call it; `each` should not
// throw (the other ranks would wait in the next unit's all-gather): record a failure and raise it
// after the call. With `drain`, a unit's views stay valid until drain() returns: the unit is
// resharded only after the next unit's all-gather, so `each` may hand its views to another
// thread (two units unsharded at a time, as limit_all_gathers allows).
void visit_full_state_dict(FullyShardedDataParallel& root, bool rank0_only,
                           const std::function<void(const std::vector<FullEntry>&)>& begin,
                           const std::function<void(std::size_t, const Tensor&)>& each,
                           const std::function<void()>& drain = {});

// Loads full values by FQN (as full_state_dict writes them; a tied parameter may be given under
// any of its FQNs). Strict: a missing parameter or an unknown key is a KeyError naming it, a
// shape mismatch a ValueError naming the FQN and both shapes.
void load_full_state_dict(FullyShardedDataParallel& root, const NamedTensors& state);

}  // namespace fsdp
