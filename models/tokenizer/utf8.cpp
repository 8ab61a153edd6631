#include "models/tokenizer/utf8.h"

#include <fmt/format.h>

#include "core/input_error.h"

namespace fsdp::models {

namespace {

bool continuation(unsigned char b) {
  return (b & 0xC0) == 0x80;
}

// The length of the longest prefix of a valid sequence at s[i] (at least 1): the "maximal
// subpart" that from_utf8_lossy replaces by one U+FFFD when the whole sequence is not valid.
std::size_t maximal_invalid_subpart(std::string_view s, std::size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  std::size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 1;
  }
  std::size_t n = 1;
  for (; n < need && i + n < s.size(); ++n) {
    const auto b = static_cast<unsigned char>(s[i + n]);
    if (n == 1 ? (b < lo || b > hi) : !continuation(b)) break;
  }
  return n;
}

}  // namespace

std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  const std::size_t n = maximal_invalid_subpart(s, i);
  const std::size_t need = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  return b0 >= 0xC2 && b0 <= 0xF4 && n == need ? n : 0;
}

std::optional<std::size_t> first_invalid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {  // the common case, without a call
      ++i;
      continue;
    }
    const std::size_t n = utf8_sequence_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::nullopt;
}

void check_utf8(std::string_view s) {
  if (auto at = first_invalid_utf8(s))
    throw InputError(fmt::format("the text is not valid UTF-8: byte 0x{:02X} at offset {}",
                                 static_cast<unsigned char>(s[*at]), *at));
}

std::string from_utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence_length(s, i);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD
      i += maximal_invalid_subpart(s, i);
    }
  }
  return out;
}

char32_t decode_utf8(std::string_view s, std::size_t i, std::size_t length) {
  const auto b = [&](std::size_t k) {
    return static_cast<char32_t>(static_cast<unsigned char>(s[i + k]));
  };
  switch (length) {
    case 1:
      return b(0);
    case 2:
      return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3:
      return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

void append_utf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

}  // namespace fsdp::models
