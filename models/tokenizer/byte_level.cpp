#include "models/tokenizer/byte_level.h"

#include <array>

#include "models/tokenizer/utf8.h"

namespace fsdp::models {

namespace {

bool stands_for_itself(unsigned b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Table {
  std::array<char32_t, 256> char_of_byte{};
  std::array<std::string, 256> utf8_of_byte;
  std::array<int, 0x100 + 68> byte_of_char{};  // -1: not in the table

  Table() {
    byte_of_char.fill(-1);
    unsigned next = 0;
    for (unsigned b = 0; b < 256; ++b) {
      char_of_byte[b] = stands_for_itself(b) ? char32_t(b) : char32_t(0x100 + next++);
      byte_of_char[char_of_byte[b]] = int(b);
      append_utf8(char_of_byte[b], utf8_of_byte[b]);
    }
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

void append_byte_level(std::string_view bytes, std::string& out) {
  const Table& t = table();
  for (char c : bytes) out += t.utf8_of_byte[static_cast<unsigned char>(c)];
}

std::optional<unsigned char> byte_of_char(char32_t c) {
  const Table& t = table();
  if (c >= t.byte_of_char.size() || t.byte_of_char[c] < 0) return std::nullopt;
  return static_cast<unsigned char>(t.byte_of_char[c]);
}

void append_token_bytes(std::string_view token, std::string& out) {
  const std::size_t start = out.size();
  for (std::size_t i = 0; i < token.size();) {
    const std::size_t n = utf8_sequence_length(token, i);
    std::optional<unsigned char> b;
    if (n > 0) b = byte_of_char(decode_utf8(token, i, n));
    if (!b) {  // a character outside the table: the token's own bytes
      out.resize(start);
      out.append(token);
      return;
    }
    out.push_back(static_cast<char>(*b));
    i += n;
  }
}

}  // namespace fsdp::models
