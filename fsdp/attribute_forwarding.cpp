#include "fsdp/attribute_forwarding.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/fqn.h"
#include "core/traversal/wrapper_marker.h"
#include "fsdp/fully_sharded_data_parallel.h"

namespace fsdp {

nn::ModulePtr getattr(const nn::ModulePtr& module, const std::string& name) {
  nn::ModulePtr m = module;
  while (true) {
    if (m->has_child(name) && m->child(name)) return m->child(name);
    auto unit = std::dynamic_pointer_cast<FullyShardedDataParallel>(m);
    if (!unit) break;
    m = unit->module();
  }
  throw KeyError(fmt::format("'{}' object has no attribute '{}'", module->type_name(), name));
}

nn::ModulePtr getitem(const nn::ModulePtr& module, std::int64_t index) {
  const nn::Module& m = traversal::unwrapped(*module);  // FSDP wrappers forward to what they wrap
  std::vector<nn::ModulePtr> items;
  for (const auto& [name, child] : m.child_slots())
    if (child) items.push_back(child);
  const auto n = static_cast<std::int64_t>(items.size());
  const std::int64_t i = index < 0 ? index + n : index;
  FSDP_CHECK(i >= 0 && i < n, IndexError, "index {} is out of range for {} of {} modules", index,
             m.type_name(), n);
  return items[static_cast<std::size_t>(i)];
}

std::string clean_tensor_name(const std::string& name) {
  std::string out = name;
  for (const std::string seg : {"_fsdp_wrapped_module.", "_checkpoint_wrapped_module."}) {
    for (std::size_t pos; (pos = out.find(seg)) != std::string::npos;) out.erase(pos, seg.size());
  }
  return out;
}

std::string state_dict_key(const std::string& prefix, const std::string& name) {
  return clean_tensor_name(join_fqn(prefix, name));
}

std::vector<std::pair<std::string, Tensor>> clean_named_parameters(nn::Module& module) {
  auto out = module.named_parameters();
  for (auto& [name, p] : out) name = clean_tensor_name(name);
  return out;
}

}  // namespace fsdp
