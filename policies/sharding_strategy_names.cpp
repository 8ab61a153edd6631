#include "policies/sharding_strategy_names.h"

#include <fmt/format.h>

#include <array>
#include <utility>

namespace fsdp::policies {

namespace {
// Declaration order: the order the choices are listed in.
constexpr std::array<std::pair<ShardingStrategy, std::string_view>, 5> kNames{{
    {ShardingStrategy::FULL_SHARD, "FULL_SHARD"},
    {ShardingStrategy::SHARD_GRAD_OP, "SHARD_GRAD_OP"},
    {ShardingStrategy::NO_SHARD, "NO_SHARD"},
    {ShardingStrategy::HYBRID_SHARD, "HYBRID_SHARD"},
    {ShardingStrategy::_HYBRID_SHARD_ZERO2, "_HYBRID_SHARD_ZERO2"},
}};
constexpr std::string_view kPythonPrefix = "ShardingStrategy.";
}  // namespace

std::string strategy_name(ShardingStrategy s) {
  for (const auto& [value, name] : kNames)
    if (value == s) return std::string(name);
  return fmt::format("?({})", static_cast<int>(s));  // not a declared value
}

std::vector<std::string> strategy_names() {
  std::vector<std::string> out;
  for (const auto& [value, name] : kNames) out.emplace_back(name);
  return out;
}

std::optional<ShardingStrategy> find_strategy(std::string_view name) {
  if (name.substr(0, kPythonPrefix.size()) == kPythonPrefix)
    name.remove_prefix(kPythonPrefix.size());
  for (const auto& [value, n] : kNames)
    if (n == name) return value;
  return std::nullopt;
}

std::string unknown_strategy_message(std::string_view name, std::string_view hint,
                                     std::string_view extra_choice) {
  std::vector<std::string> choices = strategy_names();
  if (!extra_choice.empty()) choices.emplace_back(extra_choice);
  std::string list;
  for (std::size_t i = 0; i < choices.size(); ++i)
    list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  return fmt::format("unknown strategy '{}'{}; choose {}", name, hint, list);
}

}  // namespace fsdp::policies
