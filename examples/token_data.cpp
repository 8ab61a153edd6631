#include "examples/token_data.h"

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

}  // namespace fsdp::examples
