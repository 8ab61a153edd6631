#include "core/traversal/wrapper_marker.h"

#include <any>

namespace fsdp::traversal {

void mark_as_wrapper(nn::Module& wrapper, const std::string& cls) {
  wrapper.set_attr(kWrapperClassAttr, cls);
}

const std::string* wrapper_class(const nn::Module& m) {
  static const std::string key = kWrapperClassAttr;  // built once: asked for every module
  if (!m.has_attr(key)) return nullptr;
  return std::any_cast<std::string>(&m.attr(key));
}

}  // namespace fsdp::traversal
