// FakeTensorMode: shape propagation without computation. Every core op runs on meta copies of its
// inputs (shape and dtype, no storage), so a function's output shapes and dtypes come out without
// touching data; tensors that are already meta pass through.
#pragma once

#include <string>
#include <unordered_map>

#include "core/dispatch/dispatch_mode.h"

namespace fsdp::ops {

class FakeTensorMode : public dispatch::DispatchMode {
 public:
  std::string name() const override { return "FakeTensorMode"; }
  dispatch::ModeKind kind() const override { return dispatch::ModeKind::Fake; }
  nn::Value handle(const dispatch::OpCall& call) override;
  // The meta tensor standing for t (one per real tensor, so identity is kept).
  Tensor fake(const Tensor& t);

 private:
  std::unordered_map<const TensorImpl*, Tensor> fakes_;
  std::vector<Tensor> alive_;
};

// FunctionalTensorMode: the functionalization key of higher-order operators. Core ops are
// functional apart from four in-place updates (add_, mul_, uniform_, normal_), which pass through.
class FunctionalizeMode : public dispatch::DispatchMode {
 public:
  std::string name() const override { return "FunctionalTensorMode"; }
  dispatch::ModeKind kind() const override { return dispatch::ModeKind::Functionalize; }
  nn::Value handle(const dispatch::OpCall& call) override { return call.run(); }
};

}  // namespace fsdp::ops
