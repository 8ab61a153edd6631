#include "fsdp/events.h"

namespace fsdp {

const char* to_string(RuntimeEvent::Kind kind) {
  switch (kind) {
    case RuntimeEvent::Kind::Unshard:
      return "Unshard";
    case RuntimeEvent::Kind::Prefetch:
      return "Prefetch";
    case RuntimeEvent::Kind::Reshard:
      return "Reshard";
    case RuntimeEvent::Kind::ReduceGrad:
      return "ReduceGrad";
  }
  return "?";
}

std::string RuntimeEvent::str() const {
  return std::string(to_string(kind)) + "(" + unit + ")";
}

std::string to_string(const std::vector<RuntimeEvent>& events) {
  std::string out;
  for (std::size_t i = 0; i < events.size(); ++i) out += (i ? ", " : "") + events[i].str();
  return out;
}

}  // namespace fsdp
