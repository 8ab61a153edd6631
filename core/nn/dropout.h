// torch.nn.Dropout (class _DropoutNd in its ancestry, as in PyTorch).
#pragma once

#include "core/module.h"
#include "core/nn/cloneable.h"

namespace fsdp::nn {

// Python's _DropoutNd: holds p and inplace; ValueError unless 0 <= p <= 1.
class DropoutBase : public Module {
 public:
  static const ModuleClass& static_class() {
    static const ModuleClass& cls = ModuleClass::get("_DropoutNd", {&Module::static_class()});
    return cls;
  }
  std::string extra_repr() const override;

  const double p;
  const bool inplace;

 protected:
  DropoutBase(const ModuleClass& cls, double p, bool inplace);
};

// Zeroes elements with probability p while training and scales the rest by 1/(1-p); the
// identity in eval mode. Draws from this thread's default generator.
class Dropout : public DropoutBase, public Cloneable {
 public:
  FSDP_MODULE_CLASS(Dropout, DropoutBase)
  // inplace is accepted for compatibility; the result is computed out of place (same values).
  explicit Dropout(double p = 0.5, bool inplace = false)
      : DropoutBase(static_class(), p, inplace) {}
  Value forward(const Args& args) override { return forward(args.tensor(0)); }
  Tensor forward(const Tensor& input);
  ModulePtr clone_structure() const override { return std::make_shared<Dropout>(p, inplace); }
};

}  // namespace fsdp::nn
