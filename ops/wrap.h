// The wrap family of higher-order operators (torch/_higher_order_ops/wrap.py). Each runs a body (a
// function or a graph module) under a changed regime; under a Tracer each is recorded as one
// call_function node whose first argument (after leading flags) is a get_attr of the traced body
// ("wrap_body_<i>"), followed by the body's inputs and the tensors it reads from outside.
//
// Eagerly they run the body directly, like upstream's, whose __call__ never reaches the
// dispatcher: a mode with no rule for them (selective checkpointing's, a user's) sees the body's
// ops. Fake and functionalization modes see the body's ops too.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "ops/graph/graph_module.h"
#include "ops/higher_order_op.h"

namespace fsdp::ops {

const HigherOrderOperator& wrap_op();
const HigherOrderOperator& wrap_with_set_grad_enabled_op();
const HigherOrderOperator& wrap_activation_checkpoint_op();
const HigherOrderOperator& tag_activation_checkpoint_op();

// wrap(func, *args, **kwargs) = func(*args, **kwargs) (upstream: "used for testing the
// HigherOrderOperator mechanism").
nn::Value wrap(const Object& fn, const std::vector<nn::Value>& args, const Kwargs& kwargs = {});

// Runs fn with grad mode `enabled`, then restores the previous mode. Unlike upstream (which sets
// and resets grad mode without try/finally), the previous mode is restored also when fn throws.
nn::Value wrap_with_set_grad_enabled(bool enabled, const Object& fn,
                                     const std::vector<nn::Value>& args, const Kwargs& kwargs = {});

// checkpoint(Interpreter(fn).run, *args, **kwargs) with use_reentrant and preserve_rng_state
// forced to false, as upstream. fn must be a graph module.
nn::Value wrap_activation_checkpoint(const Object& fn, const std::vector<nn::Value>& args,
                                     Kwargs kwargs = {});

// Splits checkpoint's own keywords (use_reentrant, context_fn, determinism_check, debug,
// early_stop, preserve_rng_state) from the body's, keeping the caller's order.
std::pair<Kwargs, Kwargs> divide_kwargs(const Kwargs& kwargs);

// Tags every call_function/call_method/call_module node with a fresh "ac_graph_id" (a process-wide
// counter starting at 1) and "recompute" = PREFER_RECOMPUTE, or an empty std::any (Python's None)
// when is_sac. Returns gm, changed in place.
graph::GraphModulePtr tag_nodes(const graph::GraphModulePtr& gm, bool is_sac);

// Meta key of the selective-checkpoint context function (a ContextFn) in GraphModule::meta.
inline constexpr const char* kCheckpointContextFnKey = "_checkpoint_context_fn";

// tag_activation_checkpoint(gmod, *args, **kwargs). With a context function in gm->meta
// (selective checkpointing): warns once, tags nodes with recompute unset and runs
// checkpoint(Interpreter(gm).run) with use_reentrant/preserve_rng_state false and that context
// function. Otherwise tags nodes PREFER_RECOMPUTE and runs the interpreter directly, dropping
// kwargs (upstream's quirk, reproduced: its non-selective path calls Interpreter(gmod).run(*args)).
// Under a Tracer: one node, with the body re-traced.
nn::Value tag_activation_checkpoint(const graph::GraphModulePtr& gm,
                                    const std::vector<nn::Value>& args, Kwargs kwargs = {});

// The body of a higher-order operator as a function: a function, or a module called with args.
Function as_function(const Object& fn);

}  // namespace fsdp::ops
