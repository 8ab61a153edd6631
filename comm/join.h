// Internal: "a, b, c" for error messages (fmt::join trips a GCC 12 false -Wstringop-overflow).
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace fsdp::comm {

template <typename T>
std::string join(const std::vector<T>& items, const char* separator = ", ") {
  std::ostringstream out;
  for (std::size_t i = 0; i < items.size(); ++i) out << (i ? separator : "") << items[i];
  return out.str();
}

}  // namespace fsdp::comm
