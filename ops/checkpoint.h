// Non-reentrant activation checkpointing (torch.utils.checkpoint with use_reentrant=False): the
// function runs normally, but the tensors its ops save for backward are not kept; when backward
// first needs one, the function is run again (grad mode on, the RNG state of the forward restored
// so dropout masks match) and the saved tensors are taken from that recomputation, matched by
// the order in which they were saved.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/dispatch/dispatch_mode.h"
#include "core/error.h"
#include "ops/object.h"

namespace fsdp::ops {

// torch.utils.checkpoint.CheckpointError.
class CheckpointError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

// Returns the two modes of selective checkpointing: (forward, recompute).
using ContextFn = std::function<std::pair<dispatch::ModePtr, dispatch::ModePtr>()>;

struct CheckpointOptions {
  // Only the non-reentrant algorithm exists here: unset means false (upstream warns and defaults
  // to the reentrant one, which it is deprecating); true is NotImplementedError.
  std::optional<bool> use_reentrant;
  bool preserve_rng_state = true;  // restore this thread's default generator for recomputation
  ContextFn context_fn;            // null: no modes (upstream's noop_context_fn)
  std::string determinism_check = "default";  // "default": recomputed shapes/dtypes must match
  bool debug = false;
  bool early_stop = true;  // stop recomputing once every saved tensor has been recomputed
};

// checkpoint(function, *args, **kwargs): runs fn(args) under checkpointing.
nn::Value checkpoint(const Function& fn, const nn::Args& args,
                     const CheckpointOptions& options = {});
// For a function of one tensor.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x,
                  const CheckpointOptions& options = {});
// Upstream's keyword form: checkpoint's own keywords (use_reentrant, preserve_rng_state,
// context_fn (an opaque ContextFn), determinism_check, debug, early_stop) are taken out of
// `kwargs`; the others go to fn.
nn::Value checkpoint(const Function& fn, const std::vector<nn::Value>& args, const Kwargs& kwargs);

// Counts of this thread's checkpoint recomputations (tests assert recompute counts).
std::int64_t checkpoint_recompute_count();

}  // namespace fsdp::ops
