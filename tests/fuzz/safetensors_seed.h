// The small, valid safetensors file that the reader's mutation test and libFuzzer target start
// from: three tensors of different dtypes and a metadata entry.
#pragma once

#include <string>

namespace fsdp::fuzz {

// 8-byte length, then {"__metadata__":{"format":"pt"},"w":F32[2,3],"ids":I64[2],"h":BF16[1]},
// padded to 8, then 24 + 16 + 2 data bytes.
inline std::string safetensors_seed() {
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                             R"("ids":{"dtype":"I64","shape":[2],"data_offsets":[24,40]},)"
                             R"("h":{"dtype":"BF16","shape":[1],"data_offsets":[40,42]}})";
  std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((padded.size() >> (8 * i)) & 0xff);
  out += padded;
  for (int i = 0; i < 42; ++i) out += static_cast<char>(i * 37 + 11);
  return out;
}

}  // namespace fsdp::fuzz
