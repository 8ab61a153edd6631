// Selective activation checkpointing (torch.utils.checkpoint's SAC): a policy decides per core
// op whether its output is saved in the forward (MUST_SAVE / PREFER_SAVE: cached, and replayed
// at recomputation instead of running the op again) or recomputed (MUST_RECOMPUTE /
// PREFER_RECOMPUTE). Forward and recomputation match cached outputs by op name and call order,
// so the policy must decide the same way in both passes (it may look at ctx.is_recompute).
//
// Use: checkpoint(fn, args, {.use_reentrant = false,
//                            .context_fn = selective_context_fn(policy)}).
//
// Our modes run above autograd, upstream's below it; two consequences are handled explicitly: a
// replayed output is marked as requiring grad when the op's inputs do (so the recomputed ops after
// it record as in the forward), and the tensors a cached op saved for its own backward (it is not
// rerun) are rebuilt at recomputation from its recomputed inputs and cached outputs
// (checkpoint_frame.h); only an op-internal temporary (e.g. a contiguous copy) is kept instead.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/dispatch/dispatch_mode.h"
#include "ops/checkpoint.h"

namespace fsdp::ops {

enum class CheckpointPolicy {
  MUST_SAVE = 0,
  PREFER_SAVE = 1,
  MUST_RECOMPUTE = 2,
  PREFER_RECOMPUTE = 3
};
std::string to_string(CheckpointPolicy p);  // "CheckpointPolicy.MUST_SAVE"
bool is_save(CheckpointPolicy p);
// Upstream's _policy_from_bool: true -> MUST_SAVE, false -> PREFER_RECOMPUTE.
CheckpointPolicy policy_from_bool(bool save);

struct SelectiveCheckpointContext {
  bool is_recompute = false;
};

using PolicyFn =
    std::function<CheckpointPolicy(const SelectiveCheckpointContext&, const dispatch::OpCall&)>;
using BoolPolicyFn =
    std::function<bool(const SelectiveCheckpointContext&, const dispatch::OpCall&)>;

// The (forward, recompute) modes sharing one cache. allow_cache_entry_mutation: do not fail when
// a cached output was modified in place before recomputation.
std::pair<dispatch::ModePtr, dispatch::ModePtr> create_selective_checkpoint_contexts(
    PolicyFn policy_fn, bool allow_cache_entry_mutation = false);
std::pair<dispatch::ModePtr, dispatch::ModePtr> create_selective_checkpoint_contexts(
    BoolPolicyFn policy_fn, bool allow_cache_entry_mutation = false);
// The list form: ops named in the list are MUST_SAVE, the others PREFER_RECOMPUTE. Each name must
// be a core op ("mm", "add.Scalar") or a higher-order operator, else ValueError.
std::pair<dispatch::ModePtr, dispatch::ModePtr> create_selective_checkpoint_contexts(
    const std::vector<std::string>& op_list, bool allow_cache_entry_mutation = false);

// functools.partial(create_selective_checkpoint_contexts, policy): a ContextFn for checkpoint().
ContextFn selective_context_fn(PolicyFn policy_fn, bool allow_cache_entry_mutation = false);
ContextFn selective_context_fn(const std::vector<std::string>& op_list,
                               bool allow_cache_entry_mutation = false);

// The names of the core ops that dispatch modes see.
const std::vector<std::string>& core_op_names();

}  // namespace fsdp::ops
