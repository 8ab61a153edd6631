#include "core/nn/cloneable.h"

#include <unordered_map>

#include "core/autograd.h"
#include "core/error.h"

namespace fsdp::nn {

ModulePtr clone_structure_of(const Module& m) {
  const auto* c = dynamic_cast<const Cloneable*>(&m);
  FSDP_CHECK(c != nullptr, TypeError,
             "deep_copy: module of class {} cannot be copied (it does not implement Cloneable)",
             m.type_name());
  return c->clone_structure();
}

namespace {
Tensor copy_tensor(const Tensor& src, std::unordered_map<const TensorImpl*, Tensor>& memo) {
  if (!src.defined()) return src;
  auto it = memo.find(src.impl());
  if (it != memo.end()) return it->second;
  Tensor dst = empty(src.shape(), TensorOptions(src.dtype(), src.device()));
  dst.copy_(src);
  if (src.requires_grad()) dst.requires_grad_(true);
  memo.emplace(src.impl(), dst);
  return dst;
}
}  // namespace

ModulePtr deep_copy(Module& m) {
  ModulePtr copy = clone_structure_of(m);
  autograd::NoGradGuard no_grad;
  auto src_modules = m.named_modules("", /*remove_duplicate=*/false);
  auto dst_modules = copy->named_modules("", /*remove_duplicate=*/false);
  FSDP_CHECK(src_modules.size() == dst_modules.size(), RuntimeError,
             "deep_copy: the rebuilt {} has {} modules but the original has {} (was a child "
             "replaced after construction?)",
             m.type_name(), dst_modules.size(), src_modules.size());
  std::unordered_map<const TensorImpl*, Tensor> memo;
  for (std::size_t i = 0; i < src_modules.size(); ++i) {
    Module& s = *src_modules[i].second;
    Module& d = *dst_modules[i].second;
    FSDP_CHECK(src_modules[i].first == dst_modules[i].first && s.type_name() == d.type_name(),
               RuntimeError, "deep_copy: structure mismatch at '{}' ({} vs {})",
               src_modules[i].first, s.type_name(), d.type_name());
    for (const auto& [name, t] : s.parameter_slots()) {
      if (!d.has_parameter(name)) d.register_parameter(name, Tensor());
      d.set_parameter(name, copy_tensor(t, memo));
    }
    for (const auto& [name, t] : s.buffer_slots()) {
      if (!d.has_buffer(name)) d.register_buffer(name, Tensor());
      d.set_buffer(name, copy_tensor(t, memo));
    }
  }
  // Training flags: modules are built in training mode; set those that differ, parents first
  // so that a child's own flag wins.
  for (std::size_t i = 0; i < src_modules.size(); ++i)
    if (src_modules[i].second->is_training() != dst_modules[i].second->is_training())
      dst_modules[i].second->train(src_modules[i].second->is_training());
  return copy;
}

}  // namespace fsdp::nn
