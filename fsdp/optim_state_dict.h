// Optimizer state keyed by parameter FQN (upstream's FSDP.optim_state_dict and
// optim_state_dict_to_load). The optimizer steps flat shards (or, with use_orig_params, 1-D
// pieces of the original parameters); its state tensors have the same layout, so they map to
// per-parameter pieces exactly as the parameters do: sharded, each rank keeps its pieces and
// any world size loads them; full, the pieces are gathered into whole tensors.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/optim/optimizer.h"
#include "fsdp/state_dict_sharded.h"

namespace fsdp {

struct ShardedOptimStateDict {
  // Pieces named optim_state_key(fqn, name); "step" whole (shape [], on every rank).
  ShardedStateDict pieces;
  std::set<std::string> state_names;  // e.g. {"exp_avg", "exp_avg_sq", "step"}
  std::vector<std::map<std::string, double>> param_groups;  // hyperparameters, torch's names
  std::vector<std::vector<std::string>> group_fqns;         // each group's parameter FQNs
};

// "state.<fqn>.<name>", the name of one state tensor of one parameter.
std::string optim_state_key(const std::string& fqn, const std::string& name);

// This rank's pieces of `optimizer`'s state for the parameters of `root` (the optimizer must
// hold the root's parameters: flat parameters or, with use_orig_params, the original ones).
ShardedOptimStateDict sharded_optim_state_dict(FullyShardedDataParallel& root,
                                               const optim::Optimizer& optimizer);

// Loads state saved at any world size or strategy: each rank takes the elements it holds.
// ValueError when the number of parameter groups differs or a parameter's state is partly
// absent; parameters without saved state start fresh, as in PyTorch.
void load_sharded_optim_state_dict(FullyShardedDataParallel& root, optim::Optimizer& optimizer,
                                   const PieceSet& pieces, const ShardedOptimStateDict& meta);

// The full optimizer state by FQN: {fqn: {name: whole tensor}}, gathered over each unit's shard
// group (every rank must call it); with rank0_only the other ranks get an empty map.
std::map<std::string, std::map<std::string, Tensor>> full_optim_state_dict(
    FullyShardedDataParallel& root, const optim::Optimizer& optimizer, bool rank0_only = true);

}  // namespace fsdp
