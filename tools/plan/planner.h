// The plan: which FSDP units a model gets under a policy (decided by the auto-wrap engine of
// policies/, with a recording wrapper), what each rank holds under a sharding strategy, and what
// a training step communicates. Every number is documented in tools/README.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/module.h"
#include "core/traversal/pointer_index.h"
#include "policies/options.h"
#include "policies/policy_expr.h"
#include "tools/plan/activations.h"

namespace fsdp::plan {

using policies::ShardingStrategy;

// Ranks are ints (the process groups' rank type): the largest world or node size.
inline constexpr std::int64_t kMaxWorldSize = 2147483647;

struct PlanOptions {
  std::optional<policies::PolicyExpr> policy;  // none: only the root unit
  std::vector<std::string> ignore;             // module FQNs (with their subtrees)
  bool mixed_precision = false;                // MixedPrecision(param_dtype=reduce_dtype=mp_dtype)
  DType mp_dtype = DType::BFloat16;
  bool use_orig_params = false;
  std::int64_t world_size = 1;
  ShardingStrategy sharding = ShardingStrategy::FULL_SHARD;
  std::int64_t node_size = 8;  // GPUs per node: HYBRID_SHARD shards within a node
  // Per-rank input for the activation estimate (tools/plan/activations.h); 0: no estimate.
  std::int64_t batch = 0, seq = 0;
};

struct PlannedParam {
  std::size_t path = 0;                // its first name in the unit's traversal: Plan::param_fqn
  const TensorImpl* tensor = nullptr;  // the parameter (its shape: tensor->sizes())
  DType dtype = DType::Float32;
  bool requires_grad = true;
  std::int64_t numel = 0;
};

// Bytes one rank holds for a unit or for the whole model.
struct RankMemory {
  std::int64_t params = 0;     // sharded parameters (full precision)
  std::int64_t grads = 0;      // sharded gradients (parameter dtype)
  std::int64_t optimizer = 0;  // Adam: exp_avg + exp_avg_sq, float32
  std::int64_t total() const { return params + grads + optimizer; }
};

struct Unit {
  std::size_t index = 0;
  std::size_t path = 0;  // its module's node in Plan::paths: Plan::unit_fqn
  std::string type;
  const nn::Module* module = nullptr;
  int parent = -1;  // the nearest enclosing unit (index), -1 for the root
  ShardingStrategy sharding = ShardingStrategy::FULL_SHARD;  // effective
  bool mixed_precision = false;                              // compute in the low-precision dtype
  std::vector<PlannedParam> params;                          // flattening order
  std::int64_t numel = 0;                                    // sum of the params' numel
  std::int64_t trainable_numel = 0;                          // requires_grad ones
  std::int64_t flat_numel = 0;    // + alignment padding (use_orig_params) + world-size padding
  std::int64_t shard_numel = 0;   // elements per rank (every rank holds this many)
  std::int64_t padded_numel = 0;  // shard_numel * shard group size: the all-gathered size
  std::int64_t padding = 0;       // padded_numel - numel
  std::map<DType, std::int64_t> bytes_per_dtype;  // unsharded, unpadded
  RankMemory per_rank;
  std::int64_t unsharded_bytes = 0;       // the all-gathered flat parameter, compute dtype
  std::int64_t unsharded_grad_bytes = 0;  // the unsharded gradient before reduce-scatter
  std::int64_t all_gather_bytes = 0;      // per step, sum of all-gather output buffers
  std::int64_t reduce_scatter_bytes = 0;  // per step, sum of reduce-scatter input buffers
  std::int64_t all_reduce_bytes = 0;      // per step (NO_SHARD; HYBRID_SHARD across nodes)
  int all_gathers_per_step = 0;
};

struct Totals {
  RankMemory per_rank;
  std::int64_t peak_unsharded_param_bytes = 0;
  std::int64_t peak_unsharded_grad_bytes = 0;
  std::int64_t peak_bytes = 0;  // per_rank.total() + both peaks
  // With --batch/--seq: the estimate's bytes, and the peak when the step's activations are all
  // held (end of forward: shards, optimizer state, unsharded parameters, activations; gradients
  // are freed by zero_grad(set_to_none=True)) or peak_bytes, whichever is larger.
  std::int64_t activation_bytes = 0;
  std::int64_t peak_with_activations_bytes = 0;
  std::int64_t all_gather_bytes = 0;
  std::int64_t reduce_scatter_bytes = 0;
  std::int64_t all_reduce_bytes = 0;
};

// A node of the plan's table of names: `name` after the path of node `parent` (-1: at the top).
// The first Plan::num_modules nodes are the modules in pre-order, each under the slot it is
// first reached through (the root's name is null); parameter names and the other paths a unit
// reaches a module by follow. A 100 000-deep chain's FQNs thus cost memory linear in their
// number; they are spelled out on demand.
struct PathNode {
  std::int64_t parent = -1;
  const std::string* name = nullptr;  // a slot name of a module of the plan's tree
};

struct Plan {
  PlanOptions options;
  std::string policy_str;                                    // canonical policy, or "none"
  ShardingStrategy sharding = ShardingStrategy::FULL_SHARD;  // effective (world size 1 clamps)
  std::int64_t shard_group_size = 1;                         // ranks a flat parameter is split over
  nn::ModulePtr root;
  std::size_t num_modules = 0;   // distinct module objects
  std::int64_t model_numel = 0;  // distinct parameters
  std::int64_t model_param_bytes = 0;
  std::int64_t ignored_numel = 0;
  std::vector<std::string> ignored_modules;  // FQNs as given, plus nothing else
  std::vector<Unit> units;                   // construction order, root last
  Totals totals;
  std::optional<ActivationEstimate> activations;  // with PlanOptions::batch/seq
  std::vector<std::string> warnings;
  std::vector<PathNode> paths;
  traversal::PointerIndex module_index;  // module -> its pre-order index (= its node in paths)
  std::vector<std::int32_t> unit_at;     // per pre-order index: the module's first unit, or -1

  // "layers.0.attn.weight".
  std::string param_fqn(const PlannedParam& p) const { return path_str(p.path); }
  // The unit's module path in the unwrapped model ("" = root).
  std::string unit_fqn(const Unit& u) const { return path_str(u.path); }
  // The dotted path of node `node`; when it is longer than `max_chars`, only its last
  // `max_chars` characters, and *cut is set (the work is bounded by max_chars, not the depth).
  std::string path_str(std::size_t node, std::size_t max_chars = std::string::npos,
                       bool* cut = nullptr) const;
};

// Builds the plan; throws InputError for bad options (unknown --ignore path, ...) and the
// upstream exceptions (ValueError for the frozen-parameter violation) from the engine.
Plan make_plan(const nn::ModulePtr& root, const PlanOptions& options);

}  // namespace fsdp::plan
