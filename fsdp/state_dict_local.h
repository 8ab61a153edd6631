// LOCAL_STATE_DICT: each unit's flat shard as this rank holds it (padding included), under
// "<unit FQN>._flat_param", with a description of the wrapping that produced it. Loading checks
// the description: a local state dict only fits the same wrapping, strategy and world size. A
// NO_SHARD unit (world size 1 included) gives its parameters by FQN instead, whole, as upstream
// (which returns a full state dict for NO_SHARD units).
#pragma once

#include <map>
#include <string>

#include "fsdp/full_state_dict.h"

namespace fsdp {

struct LocalStateDict {
  NamedTensors tensors;  // flat shards (copies), then buffers (whole)
  // Per flat shard key: "rank R of G; N elements; params fqn[shape], ..." as saved.
  std::map<std::string, std::string> metadata;
};

LocalStateDict local_state_dict(FullyShardedDataParallel& root);

// ValueError naming the key, what was saved and what this rank's unit is, when the wrapping,
// the rank, the shard group size or the shard size differ ("use SHARDED_STATE_DICT to load at
// another world size or wrapping"); KeyError for an unknown key.
void load_local_state_dict(FullyShardedDataParallel& root, const LocalStateDict& state);

}  // namespace fsdp
