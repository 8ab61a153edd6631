#include "fsdp/param_shards.h"

#include "core/fqn.h"
#include "fsdp/attribute_forwarding.h"
#include "fsdp/runtime.h"

namespace fsdp {

std::vector<ParamShard> param_shards(FullyShardedDataParallel& root) {
  root.runtime().root_state();
  std::vector<ParamShard> out;
  for (auto* unit : root.fsdp_units()) {
    auto* h = unit->handle();
    if (h == nullptr) continue;
    // Another rank holds the same pieces: NO_SHARD's other ranks, HYBRID's other replicas.
    const bool replica =
        (!h->sharded() && unit->rank() != 0) ||
        (unit->replicate_group() != nullptr && unit->replicate_group()->rank() != 0);
    for (std::size_t i = 0; i < h->params().size(); ++i) {
      ParamShard p;
      p.unit = unit;
      p.handle = h;
      p.index = i;
      p.fqn = join_fqn(unit->runtime().fqn(), h->params()[i].fqn);
      p.shape = h->params()[i].shape;
      p.info = h->shard_info(i);
      p.replica = replica;
      out.push_back(std::move(p));
    }
  }
  return out;
}

}  // namespace fsdp
