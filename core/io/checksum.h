// XXH3-64 checksums of bytes (libxxhash): what checkpoints record per tensor, so that a damaged
// file is found when it is read rather than trained on.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/tensor.h"

namespace fsdp::io {

// 16 lowercase hex digits: a fixed width, so a header can reserve room for it.
std::string xxh3_hex(const void* data, std::size_t bytes);
// Of a tensor's bytes, contiguous and in its dtype's layout (CPU).
std::string xxh3_hex(const Tensor& t);

// The safetensors metadata key that holds tensor `name`'s checksum ("xxh3:<name>").
inline constexpr std::string_view kChecksumKeyPrefix = "xxh3:";
inline std::string checksum_key(const std::string& name) {
  return std::string(kChecksumKeyPrefix) + name;
}

}  // namespace fsdp::io
