// The --policy language: always | size(min_num_params=N[, force_leaf=[..]][, exclude_wrap=[..]])
// | transformer([..]) | individually([..]) | modules([..]) | or(EXPR, ...), the auto-wrap policy
// of fsdp-plan, train_gpt and a user's job given as text. Parsing only; policy_build.h turns an
// expression into the policies of this folder.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/input_error.h"  // what parse_policy throws

namespace fsdp::policies {

// A class name as written, with the 1-based column where it starts (for messages).
struct ClassRef {
  std::string name;
  std::size_t column = 0;
};

struct PolicyExpr {
  enum class Kind { Always, Size, Transformer, Individually, Modules, Or };
  Kind kind = Kind::Always;
  std::size_t column = 0;  // where the policy's name starts
  // size(): upstream's defaults (1e8; force_leaf/exclude_wrap absent = the default sets).
  std::int64_t min_num_params = 100000000;
  std::optional<std::vector<ClassRef>> force_leaf;
  std::optional<std::vector<ClassRef>> exclude_wrap;
  std::vector<ClassRef> classes;     // transformer / individually / modules
  std::vector<PolicyExpr> operands;  // or

  // Canonical spelling, e.g. "or(size(min_num_params=100000000), individually([_BatchNorm]))".
  std::string str() const;
  // Every class name the expression mentions, in order of appearance.
  std::vector<ClassRef> class_refs() const;
};

// The deepest nesting of or(...) a policy may have (a deeper one is an InputError).
inline constexpr int kMaxPolicyDepth = 100;

// The names a policy may have, for messages and suggestions.
const std::vector<std::string>& policy_names();

// Parses `text`; a malformed expression throws InputError
// "--policy 'TEXT': column N: what is wrong (did you mean ...?)".
PolicyExpr parse_policy(const std::string& text);

}  // namespace fsdp::policies
