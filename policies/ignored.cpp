#include "policies/ignored.h"

#include "core/error.h"
#include "core/traversal/pre_order.h"
#include "core/traversal/wrapper_marker.h"
#include "core/warnings.h"

namespace fsdp::policies {

traversal::ModuleSet close_ignored_modules(const nn::ModulePtr& root,
                                           const std::vector<nn::ModulePtr>& ignored_modules) {
  for (const auto& m : ignored_modules) {
    FSDP_CHECK(m != nullptr, TypeError,
               "`ignored_modules` should be an iterable of `torch.nn.Module`s but got an "
               "iterable with <class 'NoneType'>");
    FSDP_CHECK(!traversal::is_wrapper(*m), ValueError,
               "`ignored_modules` should not include FSDP modules");
  }
  traversal::ModuleSet closed;
  for (const auto& m : ignored_modules)
    for (const auto& child : traversal::modules_of(m))
      if (!traversal::is_wrapper(*child)) closed.insert(child.get());
  if (closed.count(root.get()))
    warn(
        "Trying to ignore the top-level module passed into the FSDP constructor itself will "
        "result in all parameters being ignored and is not well-supported: " +
        root->repr());
  return closed;
}

traversal::ParamSet ignored_params_of(const nn::ModulePtr& root,
                                      const traversal::ModuleSet& ignored) {
  traversal::ParamSet out;
  if (ignored.empty()) return out;
  // The set is closed under descendants, so each module's own parameters suffice; walking from
  // the root keeps to modules that are alive.
  for (const auto& m : traversal::modules_of(root))
    if (ignored.count(m.get()))
      for (const auto& p : m->parameters(/*recurse=*/false)) out.insert(p.impl());
  return out;
}

}  // namespace fsdp::policies
