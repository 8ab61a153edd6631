#include "ops/selective_checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>

#include "core/autograd.h"
#include "ops/checkpoint_frame.h"
#include "ops/graph/interpreter.h"
#include "ops/higher_order_op.h"

namespace fsdp::ops {

std::string to_string(CheckpointPolicy p) {
  switch (p) {
    case CheckpointPolicy::MUST_SAVE:
      return "CheckpointPolicy.MUST_SAVE";
    case CheckpointPolicy::PREFER_SAVE:
      return "CheckpointPolicy.PREFER_SAVE";
    case CheckpointPolicy::MUST_RECOMPUTE:
      return "CheckpointPolicy.MUST_RECOMPUTE";
    case CheckpointPolicy::PREFER_RECOMPUTE:
      return "CheckpointPolicy.PREFER_RECOMPUTE";
  }
  return "?";
}

bool is_save(CheckpointPolicy p) {
  return p == CheckpointPolicy::MUST_SAVE || p == CheckpointPolicy::PREFER_SAVE;
}

CheckpointPolicy policy_from_bool(bool save) {
  return save ? CheckpointPolicy::MUST_SAVE : CheckpointPolicy::PREFER_RECOMPUTE;
}

const std::vector<std::string>& core_op_names() {
  // clang-format off
  static const std::vector<std::string> names = {
      "abs", "add", "add.Scalar", "add_", "amax", "apply_rotary", "argmax", "batch_norm", "bmm",
      "cat", "chunk", "clone", "contiguous", "cross_entropy", "div", "div.Scalar", "dropout",
      "embedding", "eq", "eq.Scalar", "exp", "expand", "flatten", "ge", "ge.Scalar", "gelu", "gt",
      "gt.Scalar", "index_select", "layer_norm", "le", "le.Scalar", "linear", "log",
      "log_softmax", "logical_not", "lt", "lt.Scalar", "masked_fill", "masked_softmax", "matmul",
      "max", "max.dim", "maximum", "mean", "minimum", "mm", "mse_loss", "mul", "mul.Scalar",
      "mul_", "narrow", "ne", "ne.Scalar", "neg", "nll_loss", "normal_",
      "packed_causal_attention", "permute", "pow", "rand", "randint", "randn", "relu", "reshape",
      "rms_norm", "rsqrt", "scaled_dot_product_attention", "select", "sigmoid", "silu", "softmax",
      "split", "split_heads", "split_with_sizes", "sqrt", "squeeze", "stack", "sub", "sum",
      "sum_to", "tanh", "to_device", "to_dtype", "transpose", "uniform_", "unsqueeze", "view",
      "where"};
  // clang-format on
  return names;
}

namespace {

// A cached output: detached tensors and the versions of their storages when cached.
struct CacheEntry {
  nn::Value value;
  std::vector<std::pair<Tensor, std::uint64_t>> versions;
  std::vector<detail::SavedSource> saved;  // what the op saved for its backward
};

std::vector<Tensor> tensors_of(const nn::Value& v) {
  std::vector<Tensor> out;
  flatten_tensors(v, out);
  return out;
}
using Cache = std::map<std::string, std::deque<CacheEntry>>;

bool is_compiling() {
  return dispatch::find_mode(dispatch::ModeKind::Tracing) != nullptr;
}

class CachingMode final : public dispatch::DispatchMode {
 public:
  CachingMode(PolicyFn policy, std::shared_ptr<Cache> cache)
      : policy_(std::move(policy)), cache_(std::move(cache)) {}
  std::string name() const override { return "_CachingTorchDispatchMode"; }
  nn::Value handle(const dispatch::OpCall& call) override {
    const CheckpointPolicy policy = policy_(SelectiveCheckpointContext{false}, call);
    const bool compiling = is_compiling();
    if (compiling)
      if (auto* meta = graph::current_node_meta()) (*meta)["recompute"] = policy;
    if (!is_save(policy) && !compiling) return call.run();
    detail::Frame* frame = detail::current_frame();
    if (frame) frame->begin_op();
    nn::Value out = call.run();
    CacheEntry entry;
    if (frame) entry.saved = frame->end_op(call.inputs(), tensors_of(out));
    entry.value = nn::map_tensors(out, [&](const Tensor& t) {
      if (!t.defined()) return t;
      Tensor d = t.detach();
      entry.versions.emplace_back(d, d.storage() ? d.storage()->version() : 0);
      return d;
    });
    (*cache_)[call.name()].push_back(std::move(entry));
    return out;
  }

 private:
  PolicyFn policy_;
  std::shared_ptr<Cache> cache_;
};

class CachedMode final : public dispatch::DispatchMode {
 public:
  CachedMode(PolicyFn policy, std::shared_ptr<Cache> cache, bool allow_mutation)
      : policy_(std::move(policy)), cache_(std::move(cache)), allow_mutation_(allow_mutation) {}
  std::string name() const override { return "_CachedTorchDispatchMode"; }
  nn::Value handle(const dispatch::OpCall& call) override {
    const CheckpointPolicy policy = policy_(SelectiveCheckpointContext{true}, call);
    if (!is_save(policy) && !is_compiling()) return call.run();
    auto it = cache_->find(call.name());
    if (it == cache_->end())
      throw RuntimeError(
          fmt::format("{} encountered during backward, but not found in storage", call.name()));
    if (it->second.empty())
      throw RuntimeError(
          "Trying to backward an extra time. You are only allowed to backward once on any region "
          "computed under selective activation checkpoint.");
    CacheEntry entry = std::move(it->second.front());
    it->second.pop_front();
    if (!allow_mutation_)
      for (const auto& [t, version] : entry.versions)
        if (t.storage() && t.storage()->version() != version)
          throw RuntimeError(
              "Tensor cached during selective activation checkpoint has been mutated");
    // Upstream replays below autograd, so a replayed output still requires grad when the op's
    // inputs do, and the recomputed ops after it record (and save) as in the forward. Ours runs
    // above autograd: mark a fresh alias of the cached value instead.
    nn::Value out = entry.value;
    if (autograd::any_requires_grad(call.inputs()))
      out = nn::map_tensors(entry.value, [](const Tensor& t) {
        if (!t.defined() || !t.is_floating_point()) return t;
        Tensor d = t.detach();
        d.requires_grad_(true);
        return d;
      });
    if (auto* frame = detail::current_frame())
      frame->replay_op(call.name(), entry.saved, call.inputs(), tensors_of(out));
    return out;
  }

 private:
  PolicyFn policy_;
  std::shared_ptr<Cache> cache_;
  bool allow_mutation_;
};

}  // namespace

std::pair<dispatch::ModePtr, dispatch::ModePtr> create_selective_checkpoint_contexts(
    PolicyFn policy_fn, bool allow_cache_entry_mutation) {
  FSDP_CHECK(static_cast<bool>(policy_fn), TypeError,
             "policy_fn_or_list must be either a function or a list of ops.");
  auto cache = std::make_shared<Cache>();
  return {std::make_shared<CachingMode>(policy_fn, cache),
          std::make_shared<CachedMode>(policy_fn, cache, allow_cache_entry_mutation)};
}

std::pair<dispatch::ModePtr, dispatch::ModePtr> create_selective_checkpoint_contexts(
    BoolPolicyFn policy_fn, bool allow_cache_entry_mutation) {
  FSDP_CHECK(static_cast<bool>(policy_fn), TypeError,
             "policy_fn_or_list must be either a function or a list of ops.");
  return create_selective_checkpoint_contexts(
      PolicyFn([policy_fn](const SelectiveCheckpointContext& ctx, const dispatch::OpCall& call) {
        return policy_from_bool(policy_fn(ctx, call));
      }),
      allow_cache_entry_mutation);
}

std::pair<dispatch::ModePtr, dispatch::ModePtr> create_selective_checkpoint_contexts(
    const std::vector<std::string>& op_list, bool allow_cache_entry_mutation) {
  const auto& known = core_op_names();
  for (const auto& op : op_list) {
    if (std::find(known.begin(), known.end(), op) != known.end() || find_operator(op)) continue;
    // Upstream adds a hint for an OpOverloadPacket; every name here is one overload.
    throw ValueError(
        fmt::format("Expected op in `op_list` to be an OpOverload but got: {} of type str. ", op));
  }
  return create_selective_checkpoint_contexts(
      PolicyFn([op_list](const SelectiveCheckpointContext&, const dispatch::OpCall& call) {
        const bool listed = std::find(op_list.begin(), op_list.end(), call.name()) != op_list.end();
        return listed ? CheckpointPolicy::MUST_SAVE : CheckpointPolicy::PREFER_RECOMPUTE;
      }),
      allow_cache_entry_mutation);
}

ContextFn selective_context_fn(PolicyFn policy_fn, bool allow_cache_entry_mutation) {
  return [policy_fn, allow_cache_entry_mutation] {
    return create_selective_checkpoint_contexts(policy_fn, allow_cache_entry_mutation);
  };
}

ContextFn selective_context_fn(const std::vector<std::string>& op_list,
                               bool allow_cache_entry_mutation) {
  create_selective_checkpoint_contexts(op_list, allow_cache_entry_mutation);  // validates now
  return [op_list, allow_cache_entry_mutation] {
    return create_selective_checkpoint_contexts(op_list, allow_cache_entry_mutation);
  };
}

}  // namespace fsdp::ops
