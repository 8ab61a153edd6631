// The model's state dict under FSDP as upstream's model.state_dict() / load_state_dict(): the
// kind is the root's state_dict_type (fsdp/state_dict_type.h), the same on every unit.
#pragma once

#include "fsdp/full_state_dict.h"
#include "fsdp/state_dict_local.h"
#include "fsdp/state_dict_sharded.h"
#include "fsdp/state_dict_type.h"

namespace fsdp {

// upstream's FullStateDictConfig (offload_to_cpu is what every tensor here already is).
struct FullStateDictConfig {
  bool offload_to_cpu = false;
  bool rank0_only = false;
};

struct StateDict {
  StateDictType type = StateDictType::FULL_STATE_DICT;
  NamedTensors full;         // FULL_STATE_DICT
  ShardedStateDict sharded;  // SHARDED_STATE_DICT
  LocalStateDict local;      // LOCAL_STATE_DICT
};

// Every rank must call it (FULL gathers). FULL and SHARDED name a tied parameter under each of
// its FQNs, as upstream's (full_state_dict() and the checkpoints keep it once).
StateDict state_dict(FullyShardedDataParallel& root, const FullStateDictConfig& full = {});

// Loads by the root's state_dict_type; ValueError when `state` is of another type. A SHARDED
// state from one rank only holds that rank's pieces: load pieces from every saving rank through
// load_sharded_state_dict(root, PieceSet) (or fsdp/checkpoint.h) to reshard.
void load_state_dict(FullyShardedDataParallel& root, const StateDict& state);

}  // namespace fsdp
