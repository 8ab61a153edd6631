// libFuzzer target: the --policy parser (policies/policy_expr.h) on arbitrary text. It must
// give an expression whose canonical spelling parses back to itself, or throw InputError naming
// the policy; anything else escaping, a crash, a sanitizer report or a slow input is a bug.
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/input_error.h"
#include "policies/policy_expr.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto e = fsdp::policies::parse_policy(text);
    const std::string canonical = e.str();
    if (fsdp::policies::parse_policy(canonical).str() != canonical) std::abort();
  } catch (const fsdp::InputError& e) {
    if (std::strstr(e.what(), "--policy") == nullptr) std::abort();
  }
  return 0;
}
