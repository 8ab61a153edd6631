#include "examples/token_files.h"

#include <fmt/format.h>

#include "core/error.h"
#include "models/tokenizer/token_file.h"

namespace fsdp::examples {

TokenData read_token_data(const char* option, const std::string& path, std::int64_t seq,
                          std::int64_t vocab) {
  models::TokenFile f;
  try {
    f = models::read_token_file(path, static_cast<std::uint32_t>(vocab));
  } catch (const Error& e) {
    throw ValueError(fmt::format("{}: {}", option, e.what()));
  }
  FSDP_CHECK(static_cast<std::int64_t>(f.tokens.size()) > seq + 1, ValueError,
             "{}: '{}' has {} tokens; --seq {} needs more than {}", option, path, f.tokens.size(),
             seq, seq + 1);
  return TokenData(std::make_shared<const std::vector<std::uint32_t>>(std::move(f.tokens)));
}

}  // namespace fsdp::examples
