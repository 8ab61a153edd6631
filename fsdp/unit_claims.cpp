#include "fsdp/unit_claims.h"

#include <fmt/format.h>

#include <mutex>
#include <unordered_map>

#include "core/fqn.h"
#include "fsdp/attribute_forwarding.h"

namespace fsdp {

namespace {

// A module's claim holds it weakly: a module dropped from a unit's tree (replace_child) must not
// pass its claim on to a new module at the same address. Parameters need no such care: the
// unit's handle keeps its parameters alive.
struct ModuleEntry {
  UnitClaim claim;
  std::weak_ptr<const nn::Module> alive;
};

struct Registry {
  std::mutex mu;
  std::unordered_map<const nn::Module*, ModuleEntry> modules;
  std::unordered_map<const TensorImpl*, UnitClaim> params;
};

Registry& registry() {
  static Registry r;
  return r;
}

thread_local nn::Module* t_naming_root = nullptr;

// The FQN of `target` in `root`'s tree (wrapper segments removed), if it is there.
std::optional<std::string> fqn_in(nn::Module& root, const nn::Module* target) {
  if (target == &root) return std::string();
  std::optional<std::string> found;
  root.visit_named_modules([&](const std::string& name, const nn::ModulePtr& m) {
    if (found || m.get() != target) return;
    std::string clean = clean_tensor_name(name + ".");  // the segments end with '.'
    clean.pop_back();
    found = std::move(clean);
  });
  return found;
}

// The module messages name FQNs from.
nn::Module& naming_root(nn::Module& unit_module) {
  return t_naming_root != nullptr ? *t_naming_root : unit_module;
}

// "'tok_emb'", or the module's class when it is the one being wrapped.
std::string quoted(const std::string& fqn, const nn::Module& m) {
  return fqn.empty() ? fmt::format("the {}", m.type_name()) : fmt::format("'{}'", fqn);
}

// How messages name a claim's module or parameter and its unit.
struct ClaimNames {
  std::optional<std::string> unit_fqn;  // absent: the unit lies outside the naming tree
  std::string what;                     // "'tok_emb.weight'"
  std::string unit;                     // "the FSDP unit wrapping 'tok_emb'"
};

ClaimNames names_of(nn::Module& root, const UnitClaim& claim) {
  ClaimNames n;
  n.unit_fqn = fqn_in(root, claim.unit_module);
  if (!n.unit_fqn) {
    n.what = fmt::format("'{}' of a {} wrapped by another FSDP unit", claim.fqn,
                         claim.unit_module->type_name());
    n.unit = "that unit";
  } else {
    n.what = fmt::format("'{}'", join_fqn(*n.unit_fqn, claim.fqn));
    n.unit = n.unit_fqn->empty() ? std::string("the root FSDP unit")
                                 : fmt::format("the FSDP unit wrapping '{}'", *n.unit_fqn);
  }
  return n;
}

}  // namespace

UnitClaims::~UnitClaims() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  // Only this unit's own entries: an expired module's address may have been claimed again.
  for (const auto* m : modules_) {
    auto it = r.modules.find(m);
    if (it != r.modules.end() && it->second.claim.unit_module == unit_module_) r.modules.erase(it);
  }
  for (const auto* p : params_) r.params.erase(p);
}

void UnitClaims::claim_module(const nn::Module& m, std::string fqn) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  ModuleEntry entry{UnitClaim{unit_module_, std::move(fqn)}, m.weak_from_this()};
  auto [it, added] = r.modules.try_emplace(&m, entry);
  if (!added && it->second.alive.expired()) {
    it->second = std::move(entry);
    added = true;
  }
  if (added) modules_.push_back(&m);
}

void UnitClaims::claim_parameter(const Tensor& p, std::string fqn) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.params.emplace(p.impl(), UnitClaim{unit_module_, std::move(fqn)}).second)
    params_.push_back(p.impl());
}

std::optional<UnitClaim> UnitClaims::of_module(const nn::Module& m) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.modules.find(&m);
  if (it == r.modules.end() || it->second.alive.expired()) return std::nullopt;
  return it->second.claim;
}

std::optional<UnitClaim> UnitClaims::of_parameter(const Tensor& p) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.params.find(p.impl());
  if (it == r.params.end()) return std::nullopt;
  return it->second;
}

NamingScope::NamingScope(nn::Module& root) : active_(t_naming_root == nullptr) {
  if (active_) t_naming_root = &root;
}

NamingScope::~NamingScope() {
  if (active_) t_naming_root = nullptr;
}

std::string shared_parameter_message(nn::Module& unit_module, const std::string& fqn,
                                     const UnitClaim& other) {
  nn::Module& root = naming_root(unit_module);
  const std::string unit = fqn_in(root, &unit_module).value_or("");
  const ClaimNames o = names_of(root, other);
  return fmt::format(
      "FSDP: parameter '{}' is shared with {}, which {} already flattened; the unit wrapping {} "
      "cannot flatten it again: wrap the modules that share a parameter in one unit (their "
      "common parent), e.g. with an auto-wrap policy that keeps them together",
      join_fqn(unit, fqn), o.what, o.unit, quoted(unit, unit_module));
}

std::string already_wrapped_message(nn::Module& unit_module, const std::string& fqn,
                                    const UnitClaim& other) {
  nn::Module& root = naming_root(unit_module);
  const std::string name = join_fqn(fqn_in(root, &unit_module).value_or(""), fqn);
  const ClaimNames o = names_of(root, other);
  // The unit that manages it, unless it is the unit wrapping this very module.
  std::string by;
  if (!o.unit_fqn)
    by = fmt::format(" (another FSDP unit, wrapping a {}, manages it)",
                     other.unit_module->type_name());
  else if (!(other.fqn.empty() && *o.unit_fqn == name))
    by = fmt::format(" ({} manages it)", o.unit);
  return fmt::format(
      "FSDP: {} is already wrapped by FSDP{}: wrap each module once, and pass the wrapped model "
      "(not its original submodules) to later wrapping",
      quoted(name, unit_module), by);
}

}  // namespace fsdp
