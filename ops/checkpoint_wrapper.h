// CheckpointWrapper and apply_activation_checkpointing
// (torch/distributed/algorithms/_checkpoint/checkpoint_wrapper.py). The wrapper holds its module
// as `_checkpoint_wrapped_module` and runs it under non-reentrant checkpointing; parameter names
// and state-dict keys drop that segment, so a model loads the same with or without wrappers. It
// composes with FSDP as FSDP(checkpoint_wrapper(block)).
//
// Module::named_parameters/state_dict are not virtual: the wrapper's own methods hide them (call
// them on a CheckpointWrapper), and clean_named_parameters / clean_state_dict /
// load_clean_state_dict do the same for any module whose tree contains wrappers.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/module.h"
#include "ops/checkpoint.h"
#include "policies/options.h"
#include "policies/wrapper_fn.h"

namespace fsdp::ops {

enum class CheckpointImpl { REENTRANT, NO_REENTRANT };

inline constexpr const char* kCheckpointWrappedModule = "_checkpoint_wrapped_module";
inline constexpr const char* kCheckpointPrefix = "_checkpoint_wrapped_module.";

class CheckpointWrapper : public nn::Module {
 public:
  // Class CheckpointWrapper, a subclass of ActivationWrapper (policies may select either).
  static const nn::ModuleClass& static_class();
  // REENTRANT warns (FutureWarning, upstream's text) and then runs the non-reentrant algorithm,
  // the only one here; gradients are the same.
  explicit CheckpointWrapper(nn::ModulePtr module,
                             CheckpointImpl checkpoint_impl = CheckpointImpl::NO_REENTRANT,
                             CheckpointOptions options = {});

  nn::Value forward(const nn::Args& args) override;
  // The wrapped module (whatever occupies the slot now).
  const nn::ModulePtr& module() const { return child(kCheckpointWrappedModule); }
  CheckpointImpl checkpoint_impl() const { return impl_; }

  std::vector<std::pair<std::string, Tensor>> named_parameters(const std::string& prefix = "",
                                                               bool recurse = true,
                                                               bool remove_duplicate = true);
  std::vector<std::pair<std::string, Tensor>> state_dict(const std::string& prefix = "");
  void load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state,
                       bool strict = true);

 private:
  CheckpointImpl impl_;
  CheckpointOptions options_;
};

// checkpoint_wrapper(module, checkpoint_impl=NO_REENTRANT, **checkpoint_fn_kwargs).
nn::ModulePtr checkpoint_wrapper(nn::ModulePtr module,
                                 CheckpointImpl checkpoint_impl = CheckpointImpl::NO_REENTRANT,
                                 CheckpointOptions options = {});

// Removes every "_checkpoint_wrapped_module." segment of an FQN.
std::string clean_checkpoint_name(const std::string& name);
std::vector<std::pair<std::string, Tensor>> clean_named_parameters(nn::Module& module);
std::vector<std::pair<std::string, Tensor>> clean_state_dict(nn::Module& module);
// Loads a state dict keyed by clean FQNs into a module whose tree contains wrappers.
void load_clean_state_dict(nn::Module& module,
                           const std::vector<std::pair<std::string, Tensor>>& state,
                           bool strict = true);

// apply_activation_checkpointing(model, checkpoint_wrapper_fn, check_fn, auto_wrap_policy):
// wraps, in place, the submodules that the policy selects (check_fn through
// lambda_auto_wrap_policy when no policy is given); never the root. A callable policy (including
// ModuleWrapPolicy) runs the `_recursive_wrap` engine, a policy object without a callable form
// (CustomPolicy) runs run_policy + post-order apply, as upstream.
using CheckFn = std::function<bool(nn::Module&)>;
void apply_activation_checkpointing(const nn::ModulePtr& model,
                                    policies::WrapperFn checkpoint_wrapper_fn = {},
                                    CheckFn check_fn = {},
                                    const policies::AutoWrapPolicy& auto_wrap_policy = {});

// The --checkpoint-activations modes of the training jobs: "none"; "full": every module of a class
// in `blocks` runs under non-reentrant checkpointing; "selective": the same, saving the outputs
// of the matrix products (kSelectiveSaveOps) and recomputing the rest. Works on a plain model and
// on an FSDP-wrapped one (giving FSDP(CheckpointWrapper(block)), upstream's composition).
// ValueError naming the mode otherwise.
inline const std::vector<std::string> kSelectiveSaveOps = {"linear", "matmul", "bmm", "mm"};
void checkpoint_activations(const nn::ModulePtr& model, const std::string& mode,
                            const nn::ClassSet& blocks);

}  // namespace fsdp::ops
