#include "examples/token_data.h"

#include "core/error.h"
#include "core/random.h"

namespace fsdp::examples {

std::int64_t TokenData::size() const {
  if (bytes_) return static_cast<std::int64_t>(bytes_->size());
  return ids_ ? static_cast<std::int64_t>(ids_->size()) : 0;
}

std::string_view TokenData::raw() const {
  if (bytes_) return *bytes_;
  if (!ids_) return {};
  return {reinterpret_cast<const char*>(ids_->data()), ids_->size() * sizeof(std::uint32_t)};
}

TokenData uniform_tokens(std::int64_t count, std::int64_t vocab, std::uint64_t seed) {
  FSDP_CHECK(count >= 0 && vocab >= 1 && vocab <= (std::int64_t{1} << 32), ValueError,
             "uniform_tokens: {} tokens of a vocabulary of {}: expected a count of 0 or more and "
             "a vocabulary of 1 to 2^32",
             count, vocab);
  Generator g(seed);
  auto ids = std::make_shared<std::vector<std::uint32_t>>(static_cast<std::size_t>(count));
  // The high half of the 64x64-bit product maps a 64-bit draw onto [0, vocab) evenly.
  for (auto& id : *ids)
    id = static_cast<std::uint32_t>(
        (static_cast<unsigned __int128>(g.next_u64()) * static_cast<std::uint64_t>(vocab)) >> 64);
  return TokenData(std::shared_ptr<const std::vector<std::uint32_t>>(std::move(ids)));
}

}  // namespace fsdp::examples
