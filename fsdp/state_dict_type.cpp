#include "fsdp/state_dict_type.h"

#include <any>

#include "core/error.h"

namespace fsdp {

namespace {

// Stored as a module attribute, as upstream stores `_state_dict_type` on each FSDP instance.
constexpr const char* kAttr = "_state_dict_type";

StateDictType type_of(const FullyShardedDataParallel& unit) {
  if (!unit.has_attr(kAttr)) return StateDictType::FULL_STATE_DICT;
  return std::any_cast<StateDictType>(unit.attr(kAttr));
}

}  // namespace

std::string to_string(StateDictType type) {
  switch (type) {
    case StateDictType::FULL_STATE_DICT:
      return "StateDictType.FULL_STATE_DICT";
    case StateDictType::SHARDED_STATE_DICT:
      return "StateDictType.SHARDED_STATE_DICT";
    case StateDictType::LOCAL_STATE_DICT:
      return "StateDictType.LOCAL_STATE_DICT";
  }
  return "StateDictType.?";
}

void set_state_dict_type(FullyShardedDataParallel& module, StateDictType type) {
  for (auto* unit : module.fsdp_units()) unit->set_attr(kAttr, type);
}

StateDictType state_dict_type(FullyShardedDataParallel& root) {
  const auto units = root.fsdp_units();
  const StateDictType first = type_of(*units.front());
  for (auto* unit : units)
    FSDP_CHECK(type_of(*unit) == first, AssertionError,
               "All FSDP modules should have the same state_dict_type.");
  return first;
}

StateDictTypeGuard::StateDictTypeGuard(FullyShardedDataParallel& module, StateDictType type) {
  for (auto* unit : module.fsdp_units()) previous_.emplace_back(unit, type_of(*unit));
  set_state_dict_type(module, type);
}

StateDictTypeGuard::~StateDictTypeGuard() {
  for (auto& [unit, type] : previous_) unit->set_attr(kAttr, type);
}

}  // namespace fsdp
