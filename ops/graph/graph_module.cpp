#include "ops/graph/graph_module.h"

#include <fmt/format.h>

#include "core/error.h"
#include "ops/graph/interpreter.h"

namespace fsdp::ops::graph {

void GraphModule::set_tensor_attr(const std::string& qualname, Tensor t) {
  tensors_[qualname] = std::move(t);
}

void GraphModule::set_module_attr(const std::string& qualname, nn::ModulePtr m) {
  // A plain name is also a child, so the module tree (and named_parameters) sees it.
  if (qualname.find('.') == std::string::npos && !has_child(qualname)) register_module(qualname, m);
  modules_[qualname] = std::move(m);
}

Object GraphModule::get_attr(const std::string& qualname) const {
  if (auto it = tensors_.find(qualname); it != tensors_.end()) return Object(it->second);
  if (auto it = modules_.find(qualname); it != modules_.end()) return Object(it->second);
  throw KeyError(fmt::format("GraphModule has no attribute '{}'", qualname));
}

std::string GraphModule::fresh_qualname(const std::string& prefix) const {
  for (int i = 0;; ++i) {
    std::string name = fmt::format("{}_{}", prefix, i);
    if (!tensors_.count(name) && !modules_.count(name)) return name;
  }
}

nn::Value GraphModule::forward(const nn::Args& args) {
  FSDP_CHECK(args.kwargs.empty(), TypeError,
             "GraphModule.forward: keyword arguments are not supported (got {})",
             args.kwargs.begin()->first);
  return Interpreter(std::static_pointer_cast<GraphModule>(shared_from_this()))
      .run(args.positional);
}

}  // namespace fsdp::ops::graph
