#include "ops/checkpoint_wrapper.h"

#include <map>

#include "core/traversal/post_order.h"
#include "core/traversal/recursive_wrap.h"
#include "core/warnings.h"
#include "ops/selective_checkpoint.h"
#include "policies/lambda_policy.h"
#include "policies/policy.h"

namespace fsdp::ops {

const nn::ModuleClass& CheckpointWrapper::static_class() {
  static const nn::ModuleClass& cls = nn::ModuleClass::get(
      "CheckpointWrapper", {&nn::named_class("ActivationWrapper", {&nn::Module::static_class()})});
  return cls;
}

CheckpointWrapper::CheckpointWrapper(nn::ModulePtr module, CheckpointImpl checkpoint_impl,
                                     CheckpointOptions options)
    : nn::Module(static_class()), impl_(checkpoint_impl), options_(std::move(options)) {
  FSDP_CHECK(module != nullptr, ValueError, "CheckpointWrapper: the module to wrap is null");
  if (impl_ == CheckpointImpl::REENTRANT)
    warn(
        "Please specify CheckpointImpl.NO_REENTRANT as CheckpointImpl.REENTRANT will soon be "
        "removed as the default and eventually deprecated.",
        "FutureWarning");
  options_.use_reentrant = false;
  register_module(kCheckpointWrappedModule, std::move(module));
}

nn::Value CheckpointWrapper::forward(const nn::Args& args) {
  nn::ModulePtr m = module();
  return checkpoint([m](const nn::Args& a) { return (*m)(a); }, args, options_);
}

std::vector<std::pair<std::string, Tensor>> CheckpointWrapper::named_parameters(
    const std::string& prefix, bool recurse, bool remove_duplicate) {
  auto out = nn::Module::named_parameters(prefix, recurse, remove_duplicate);
  for (auto& [name, t] : out) name = clean_checkpoint_name(name);
  return out;
}

std::vector<std::pair<std::string, Tensor>> CheckpointWrapper::state_dict(
    const std::string& prefix) {
  auto out = nn::Module::state_dict(prefix);
  for (auto& [name, t] : out) name = clean_checkpoint_name(name);
  return out;
}

void CheckpointWrapper::load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state,
                                        bool strict) {
  load_clean_state_dict(*this, state, strict);
}

nn::ModulePtr checkpoint_wrapper(nn::ModulePtr module, CheckpointImpl checkpoint_impl,
                                 CheckpointOptions options) {
  return std::make_shared<CheckpointWrapper>(std::move(module), checkpoint_impl,
                                             std::move(options));
}

std::string clean_checkpoint_name(const std::string& name) {
  std::string out = name;
  const std::string seg = kCheckpointPrefix;
  for (std::size_t pos; (pos = out.find(seg)) != std::string::npos;) out.erase(pos, seg.size());
  return out;
}

std::vector<std::pair<std::string, Tensor>> clean_named_parameters(nn::Module& module) {
  auto out = module.nn::Module::named_parameters();
  for (auto& [name, t] : out) name = clean_checkpoint_name(name);
  return out;
}

std::vector<std::pair<std::string, Tensor>> clean_state_dict(nn::Module& module) {
  auto out = module.nn::Module::state_dict();
  for (auto& [name, t] : out) name = clean_checkpoint_name(name);
  return out;
}

void load_clean_state_dict(nn::Module& module,
                           const std::vector<std::pair<std::string, Tensor>>& state, bool strict) {
  // The module's own keys, cleaned, map back to its real keys (upstream's load pre-hook re-adds
  // the prefix).
  std::map<std::string, std::string> real;
  for (const auto& [name, t] : module.nn::Module::state_dict())
    real.emplace(clean_checkpoint_name(name), name);
  std::vector<std::pair<std::string, Tensor>> renamed;
  renamed.reserve(state.size());
  for (const auto& [name, t] : state) {
    auto it = real.find(name);
    renamed.emplace_back(it == real.end() ? name : it->second, t);
  }
  module.nn::Module::load_state_dict(renamed, strict);
}

void apply_activation_checkpointing(const nn::ModulePtr& model,
                                    policies::WrapperFn checkpoint_wrapper_fn, CheckFn check_fn,
                                    const policies::AutoWrapPolicy& auto_wrap_policy) {
  if (!checkpoint_wrapper_fn)
    checkpoint_wrapper_fn = [](nn::ModulePtr m, const policies::WrapperOptions&) {
      return checkpoint_wrapper(std::move(m));
    };
  if (!check_fn) check_fn = [](nn::Module&) { return true; };
  policies::AutoWrapPolicy policy =
      auto_wrap_policy.empty()
          ? policies::AutoWrapPolicy(policies::lambda_auto_wrap_policy(check_fn))
          : auto_wrap_policy;
  if (policies::CallablePolicy callable = policy.callable()) {
    traversal::recursive_wrap(
        model, callable,
        [&](const nn::ModulePtr& m) {
          return policies::wrap_module(m, checkpoint_wrapper_fn, policies::WrapperOptions{});
        },
        {}, {}, /*only_wrap_children=*/true);
    return;
  }
  FSDP_CHECK(policy.policy() != nullptr, ValueError,
             "Expected {} to be callable or be a pre-defined wrap policy", policy.str());
  policies::TargetModules targets =
      policy.policy()->run_policy(model, {}, policies::WrapperOptions{});
  traversal::post_order_apply(model, [&](const nn::ModulePtr& m) -> nn::ModulePtr {
    if (m == model) return nullptr;
    const policies::WrapperOptions* options = targets.find(m.get());
    return options ? checkpoint_wrapper_fn(m, *options) : nullptr;
  });
}

void checkpoint_activations(const nn::ModulePtr& model, const std::string& mode,
                            const nn::ClassSet& blocks) {
  FSDP_CHECK(mode == "none" || mode == "full" || mode == "selective", ValueError,
             "checkpoint_activations: expected none, full or selective, got '{}'", mode);
  if (mode == "none") return;
  CheckpointOptions options;
  if (mode == "selective") options.context_fn = selective_context_fn(kSelectiveSaveOps);
  apply_activation_checkpointing(
      model,
      [options](nn::ModulePtr m, const policies::WrapperOptions&) {
        return checkpoint_wrapper(std::move(m), CheckpointImpl::NO_REENTRANT, options);
      },
      [blocks](nn::Module& m) { return m.isinstance(blocks); });
}

}  // namespace fsdp::ops
