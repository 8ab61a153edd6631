#include "tools/plan/known_classes.h"

#include <unordered_map>

namespace fsdp::plan {

namespace {
const std::unordered_map<std::string, std::vector<std::string>>& table() {
  static const std::unordered_map<std::string, std::vector<std::string>> t = {
#include "tools/plan/known_classes_table.inc"
  };
  return t;
}
}  // namespace

const std::vector<std::string>& known_bases(const std::string& type) {
  static const std::vector<std::string> module_only{"Module"};
  static const std::vector<std::string> none{};
  if (type == "Module") return none;
  auto it = table().find(type);
  return it == table().end() ? module_only : it->second;
}

bool is_known_class(const std::string& type) {
  return table().count(type) > 0;
}

}  // namespace fsdp::plan
