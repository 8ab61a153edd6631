// Which kind of state dict FSDP units produce and load (upstream's StateDictType and
// FSDP.set_state_dict_type / state_dict_type): FULL (unsharded, gathered), SHARDED (each rank's
// piece of every original parameter, reshardable) or LOCAL (each rank's flat shard as it is).
#pragma once

#include <string>

#include "fsdp/fully_sharded_data_parallel.h"

namespace fsdp {

enum class StateDictType { FULL_STATE_DICT, SHARDED_STATE_DICT, LOCAL_STATE_DICT };

std::string to_string(StateDictType type);  // "StateDictType.SHARDED_STATE_DICT"

// Sets the type on every FSDP unit in `module`'s tree (upstream sets it on all FSDP submodules).
void set_state_dict_type(FullyShardedDataParallel& module, StateDictType type);

// The type of every unit under `root` (FULL_STATE_DICT when never set). AssertionError
// "All FSDP modules should have the same state_dict_type." when the units disagree.
StateDictType state_dict_type(FullyShardedDataParallel& root);

// Upstream's `with FSDP.state_dict_type(model, type):` — sets the type, restores each unit's
// previous one at the end of the scope.
class StateDictTypeGuard {
 public:
  StateDictTypeGuard(FullyShardedDataParallel& module, StateDictType type);
  ~StateDictTypeGuard();
  StateDictTypeGuard(const StateDictTypeGuard&) = delete;
  StateDictTypeGuard& operator=(const StateDictTypeGuard&) = delete;

 private:
  std::vector<std::pair<FullyShardedDataParallel*, StateDictType>> previous_;
};

}  // namespace fsdp
