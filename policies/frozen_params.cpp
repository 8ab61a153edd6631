#include "policies/frozen_params.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/traversal/managed_params.h"
#include "core/traversal/post_order.h"
#include "core/warnings.h"

namespace fsdp::policies {

namespace {
// Python's repr of a list of str: ['a.b', 'c'].
std::string python_list_repr(const std::vector<std::string>& items) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string& s = items[i];
    const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
    const char q = dq ? '"' : '\'';
    if (i) out += ", ";
    out += q;
    for (char c : s) {
      if (c == '\\' || (c == q)) out += '\\';
      out += c;
    }
    out += q;
  }
  return out + "]";
}
}  // namespace

void validate_frozen_params(const nn::ModulePtr& root, const traversal::ModuleSet& modules_to_wrap,
                            const traversal::ParamSet& ignored_params, bool use_orig_params) {
  traversal::ModuleSet visited;
  traversal::PostOrderNamedModules post_order(root);
  for (std::size_t u = 0; u < post_order.size(); ++u) {
    const nn::ModulePtr& module = post_order.module(u);
    if (!modules_to_wrap.count(module.get())) continue;
    traversal::ManagedParams managed(module, ignored_params, visited);
    std::int64_t frozen_numel = 0, nonfrozen_numel = 0;
    for (std::size_t i = 0; i < managed.size(); ++i)
      (managed.param(i).requires_grad() ? nonfrozen_numel : frozen_numel) +=
          managed.param(i).numel();
    bool mixed = false, seen_frozen = false, seen_nonfrozen = false;
    for (std::size_t i = 0; i < managed.size() && !mixed; ++i) {
      (managed.param(i).requires_grad() ? seen_nonfrozen : seen_frozen) = true;
      mixed = seen_frozen && seen_nonfrozen;
    }
    if (!mixed) continue;
    // Names only for the message: materialising them for every unit would be O(depth) each.
    const std::string module_name = post_order.name(u);
    std::vector<std::string> frozen, nonfrozen;
    for (std::size_t i = 0; i < managed.size(); ++i)
      (managed.param(i).requires_grad() ? nonfrozen : frozen)
          .push_back(managed.fqn(i, module_name));
    std::string msg = module_name + " has both parameters with requires_grad=True and False.";
    if (use_orig_params) {
      msg += fmt::format(
          " We do not recommend wrapping such modules since the gradient memory usage will be "
          "higher than expected ({} numel instead of {} numel before sharding via "
          "reduce-scatter). ",
          frozen_numel + nonfrozen_numel, nonfrozen_numel);
    } else {
      msg += " FSDP does not support wrapping such modules when use_orig_params=False. ";
    }
    msg += "If possible, wrap the frozen parameters with FSDP separately.\n";
    msg += "The following parameters have requires_grad=True:\n" + python_list_repr(nonfrozen) +
           "\nThe following parameters have requires_grad=False:\n" + python_list_repr(frozen);
    if (!use_orig_params) throw ValueError(msg);
    warn(msg, "UserWarning");
  }
}

}  // namespace fsdp::policies
