// The sharding strategies' names, written once (NCCL's one ncclFuncToString): the table behind
// Python's repr, fsdp-plan's --sharding and train_gpt's --sharding, and the one message that
// lists the choices when a name is unknown.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "policies/options.h"

namespace fsdp::policies {

// "FULL_SHARD", ..., "_HYBRID_SHARD_ZERO2" (the enum's spelling, as upstream's `.name`).
std::string strategy_name(ShardingStrategy s);
// Every strategy's name, in declaration order.
std::vector<std::string> strategy_names();
// The strategy called `name` ("FULL_SHARD", or Python's "ShardingStrategy.FULL_SHARD").
std::optional<ShardingStrategy> find_strategy(std::string_view name);
// "unknown strategy 'NAME'<hint>; choose FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or
// _HYBRID_SHARD_ZERO2": `hint` is a caller's " (did you mean ...?)", `extra_choice` a caller's
// own choice listed last (train_gpt's "none").
std::string unknown_strategy_message(std::string_view name, std::string_view hint = {},
                                     std::string_view extra_choice = {});

}  // namespace fsdp::policies
