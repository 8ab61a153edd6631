#include "core/traversal/wrapper_marker.h"

#include <any>

namespace fsdp::traversal {

void mark_as_wrapper(nn::Module& wrapper, const std::string& cls) {
  wrapper.set_attr(kWrapperClassAttr, cls);
}

const std::string* wrapper_class(const nn::Module& m) {
  if (!m.has_attr(kWrapperClassAttr)) return nullptr;
  return std::any_cast<std::string>(&m.attr(kWrapperClassAttr));
}

}  // namespace fsdp::traversal
