#include "fsdp/state_dict.h"

#include <algorithm>
#include <iterator>

#include "core/error.h"
#include "fsdp/param_shards.h"

namespace fsdp {

StateDict state_dict(FullyShardedDataParallel& root, const FullStateDictConfig& full) {
  StateDict out;
  out.type = state_dict_type(root);
  switch (out.type) {
    case StateDictType::FULL_STATE_DICT:
      out.full = full_state_dict(root, full.rank0_only);
      // A tied parameter under each of its names, each after its first (upstream's keys).
      for (const auto& [alias, first] : tied_aliases(root)) {
        auto it = std::find_if(out.full.begin(), out.full.end(),
                               [&](const auto& entry) { return entry.first == first; });
        if (it != out.full.end()) out.full.insert(std::next(it), {alias, it->second.clone()});
      }
      break;
    case StateDictType::SHARDED_STATE_DICT:
      out.sharded = sharded_state_dict(root);
      for (const auto& [alias, first] : tied_aliases(root)) {
        const std::size_t n = out.sharded.size();
        for (std::size_t k = 0; k < n; ++k) {
          if (out.sharded[k].fqn != first) continue;
          TensorPiece piece = out.sharded[k];
          piece.fqn = alias;
          piece.local = piece.local.clone();
          out.sharded.push_back(std::move(piece));
        }
      }
      break;
    case StateDictType::LOCAL_STATE_DICT:
      out.local = local_state_dict(root);
      break;
  }
  return out;
}

void load_state_dict(FullyShardedDataParallel& root, const StateDict& state) {
  const StateDictType type = state_dict_type(root);
  FSDP_CHECK(type == state.type, ValueError,
             "load_state_dict: the model's state_dict_type is {} but the state dict is a {}; set "
             "the type with set_state_dict_type or StateDictTypeGuard first",
             to_string(type), to_string(state.type));
  switch (type) {
    case StateDictType::FULL_STATE_DICT:
      load_full_state_dict(root, state.full);
      break;
    case StateDictType::SHARDED_STATE_DICT:
      load_sharded_state_dict(root, PieceSet(state.sharded));
      break;
    case StateDictType::LOCAL_STATE_DICT:
      load_local_state_dict(root, state.local);
      break;
  }
}

}  // namespace fsdp
