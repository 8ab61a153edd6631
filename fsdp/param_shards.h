// Internal: every parameter an FSDP tree manages, as this rank holds it (its unit, flat
// parameter, FQN and piece): the walk that the sharded state dict, the optimizer state dict and
// checkpoints share.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "fsdp/flat_param.h"
#include "fsdp/fully_sharded_data_parallel.h"

namespace fsdp {

// One original parameter as this rank holds it: its unit, its FQN and its piece.
struct ParamShard {
  FullyShardedDataParallel* unit = nullptr;
  FlatParamHandle* handle = nullptr;
  std::size_t index = 0;  // into handle->params()
  std::string fqn;        // from the root, cleaned of wrapper prefixes
  Shape shape;
  ShardParamInfo info;   // this rank's part
  bool replica = false;  // HYBRID: a replica other than the first holds it too
};

// Every parameter managed under `root`, unit by unit (tied parameters once, under the first
// FQN). Initialises the root's runtime (collective on first use: every rank must call it).
std::vector<ParamShard> param_shards(FullyShardedDataParallel& root);

// Every parameter of `root`'s tree that no unit manages (those of ignored modules and ignored
// parameters), whole, under its cleaned FQN: upstream's state dicts and optimizer state dicts
// hold them as the plain model's, on every rank. A tied one (a module met under two names) once,
// as optimizer state dicts and norms count it, or with `each_fqn` under each of its FQNs, as the
// model's state dicts name it (nn.Module.state_dict does not de-duplicate).
std::vector<std::pair<std::string, Tensor>> unmanaged_params(FullyShardedDataParallel& root,
                                                             bool each_fqn = false);

// The persistent buffers of `root`'s tree (those torch's state_dict() holds) under each of their
// cleaned FQNs: a shared module's under every name it has, as nn.Module.state_dict gives them.
std::vector<std::pair<std::string, Tensor>> persistent_buffers(FullyShardedDataParallel& root);

// Loads what every rank holds whole from `by_name` (a state dict by FQN): the unmanaged
// parameters (each required under its first FQN: KeyError for a missing one, ValueError for
// another shape, naming `op`; its other FQNs where present) and the persistent buffers (where
// present); adds their FQNs to `used`.
void load_whole_tensors(FullyShardedDataParallel& root,
                        const std::map<std::string, const Tensor*>& by_name,
                        std::unordered_set<std::string>& used, const char* op);

// Every later FQN of a tied parameter (a parameter or a module met again under another name)
// with the FQN it is flattened under, or, for an unmanaged parameter or a persistent buffer of a
// module met twice, its first FQN: {alias, first}. Upstream's model.state_dict() names a tied
// parameter under each of them, as nn.Module.state_dict does.
std::vector<std::pair<std::string, std::string>> tied_aliases(FullyShardedDataParallel& root);

}  // namespace fsdp
