#include "ops/fake_mode.h"

#include "core/autograd.h"

namespace fsdp::ops {

Tensor FakeTensorMode::fake(const Tensor& t) {
  if (!t.defined() || t.is_meta()) return t;
  auto it = fakes_.find(t.impl());
  if (it != fakes_.end()) return it->second;
  Tensor f = empty(t.shape(), TensorOptions(t.dtype(), kMeta));
  if (t.requires_grad()) f.requires_grad_(true);
  alive_.push_back(t);
  fakes_.emplace(t.impl(), f);
  return f;
}

nn::Value FakeTensorMode::handle(const dispatch::OpCall& call) {
  std::vector<Tensor> inputs;
  inputs.reserve(call.inputs().size());
  for (const auto& t : call.inputs()) inputs.push_back(fake(t));
  return call.run(inputs);
}

}  // namespace fsdp::ops
