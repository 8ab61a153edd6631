// What each FSDP unit took at construction, the modules it manages and the parameters it
// flattened, so that a second unit taking one of them fails there, naming both: a parameter
// shared by two units (tied weights split by the wrapping; upstream fails later with an
// unrelated message, pytorch#83052) or a module wrapped twice. Process-wide, as the objects are
// (the threads backend builds every rank's model in one process); a unit's claims end with it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/module.h"

namespace fsdp {

// A module or parameter taken by the unit that wraps `unit_module`; `fqn`: its name inside it.
struct UnitClaim {
  const nn::Module* unit_module = nullptr;
  std::string fqn;
};

// One unit's claims, released when it is destroyed.
class UnitClaims {
 public:
  explicit UnitClaims(const nn::Module& unit_module) : unit_module_(&unit_module) {}
  ~UnitClaims();
  UnitClaims(const UnitClaims&) = delete;
  UnitClaims& operator=(const UnitClaims&) = delete;

  void claim_module(const nn::Module& m, std::string fqn);
  void claim_parameter(const Tensor& p, std::string fqn);
  // The unit that took `m` or `p`, if any.
  static std::optional<UnitClaim> of_module(const nn::Module& m);
  static std::optional<UnitClaim> of_parameter(const Tensor& p);

 private:
  const nn::Module* unit_module_;
  std::vector<const nn::Module*> modules_;
  std::vector<const TensorImpl*> params_;
};

// Names modules in the messages below: while a scope lives on this thread, from its module (the
// one an FSDP constructor auto-wraps, so names are the model's FQNs); the outermost scope wins.
class NamingScope {
 public:
  explicit NamingScope(nn::Module& root);
  ~NamingScope();
  NamingScope(const NamingScope&) = delete;
  NamingScope& operator=(const NamingScope&) = delete;

 private:
  bool active_;
};

// The one-line ValueErrors. `unit_module` is the module being wrapped; `fqn` is relative to it.
std::string shared_parameter_message(nn::Module& unit_module, const std::string& fqn,
                                     const UnitClaim& other);
std::string already_wrapped_message(nn::Module& unit_module, const std::string& fqn,
                                    const UnitClaim& other);

}  // namespace fsdp
