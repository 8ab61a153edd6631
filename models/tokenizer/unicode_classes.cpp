#include "models/tokenizer/unicode_classes.h"

#include <fmt/format.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace fsdp::models {

namespace {

using Ranges = std::vector<std::pair<std::uint32_t, std::uint32_t>>;

// Letters and numbers in Oniguruma's Unicode 16 tables that PCRE2 10.42's lack (its own \p{L}
// and \p{N} cover the rest; with newer tables these are already in them).
const Ranges& extra_letters() {
  static const Ranges r = {
      {0x1C89, 0x1C8A},   {0xA7CB, 0xA7CD},   {0xA7DA, 0xA7DC},   {0x105C0, 0x105F3},
      {0x10D4A, 0x10D65}, {0x10D6F, 0x10D85}, {0x10EC2, 0x10EC4}, {0x1123F, 0x11240},
      {0x11380, 0x11389}, {0x1138B, 0x1138B}, {0x1138E, 0x1138E}, {0x11390, 0x113B5},
      {0x113B7, 0x113B7}, {0x113D1, 0x113D1}, {0x113D3, 0x113D3}, {0x11BC0, 0x11BE0},
      {0x11F02, 0x11F02}, {0x11F04, 0x11F10}, {0x11F12, 0x11F33}, {0x1342F, 0x1342F},
      {0x13441, 0x13446}, {0x13460, 0x143FA}, {0x16100, 0x1611D}, {0x16D40, 0x16D6C},
      {0x18CFF, 0x18CFF}, {0x1B132, 0x1B132}, {0x1B155, 0x1B155}, {0x1DF25, 0x1DF2A},
      {0x1E030, 0x1E06D}, {0x1E4D0, 0x1E4EB}, {0x1E5D0, 0x1E5ED}, {0x1E5F0, 0x1E5F0},
      {0x2B739, 0x2B739}, {0x2EBF0, 0x2EE5D}, {0x31350, 0x323AF}};
  return r;
}

const Ranges& extra_numbers() {
  static const Ranges r = {{0x10D40, 0x10D49}, {0x116D0, 0x116E3}, {0x11BF0, 0x11BF9},
                           {0x11F50, 0x11F59}, {0x16130, 0x16139}, {0x16D70, 0x16D79},
                           {0x1CCF0, 0x1CCF9}, {0x1D2C0, 0x1D2D3}, {0x1E4F0, 0x1E4F9},
                           {0x1E5F1, 0x1E5FA}};
  return r;
}

// Oniguruma's \s: Unicode's White_Space (PCRE2's also has U+180E, a format character since
// Unicode 6.3).
const Ranges& white_space() {
  static const Ranges r = {{0x9, 0xD},       {0x20, 0x20},     {0x85, 0x85},     {0xA0, 0xA0},
                           {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
                           {0x205F, 0x205F}, {0x3000, 0x3000}};
  return r;
}

// The ranges as class items: \x{A}-\x{B} (escaped, so no mode reads them otherwise).
std::string items(const Ranges& ranges) {
  std::string out;
  for (const auto& [a, b] : ranges)
    out += a == b ? fmt::format("\\x{{{:X}}}", a) : fmt::format("\\x{{{:X}}}-\\x{{{:X}}}", a, b);
  return out;
}

// The class items of an escape Oniguruma reads otherwise ("p{L}", "p{N}", "s" after the
// backslash); empty for the rest.
std::string class_items(std::string_view escape) {
  if (escape == "p{L}") return "\\p{L}" + items(extra_letters());
  if (escape == "p{N}") return "\\p{N}" + items(extra_numbers());
  if (escape == "s") return items(white_space());
  return {};
}

// The length of the escape starting after a backslash at `at`: a letter with a braced argument
// (\p{..}, \x{..}, \N{..}, ...) through its brace, else one character (its UTF-8 bytes).
std::size_t escape_length(std::string_view pattern, std::size_t at) {
  if (at >= pattern.size()) return 0;
  if (at + 1 < pattern.size() && pattern[at + 1] == '{') {
    const std::size_t close = pattern.find('}', at + 2);
    if (close != std::string_view::npos) return close + 1 - at;
  }
  std::size_t n = 1;
  while (at + n < pattern.size() && (static_cast<unsigned char>(pattern[at + n]) & 0xC0) == 0x80)
    ++n;
  return n;
}

}  // namespace

std::string with_oniguruma_classes(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  std::size_t i = 0;
  while (i < pattern.size()) {
    const char c = pattern[i];
    if (c != '\\') {
      if (!in_class && c == '[') {
        in_class = true;
        out += c;
        ++i;
        // A ']' first in the class (after an optional '^') is a literal.
        if (i < pattern.size() && pattern[i] == '^') out += pattern[i++];
        if (i < pattern.size() && pattern[i] == ']') out += pattern[i++];
        continue;
      }
      if (in_class && c == '[' && pattern.substr(i, 2) == "[:") {  // a POSIX class [:name:]
        const std::size_t close = pattern.find(":]", i + 2);
        const std::size_t end = close == std::string_view::npos ? i + 1 : close + 2;
        out += pattern.substr(i, end - i);
        i = end;
        continue;
      }
      if (in_class && c == ']') in_class = false;
      out += c;
      ++i;
      continue;
    }
    if (pattern.substr(i, 2) == "\\Q") {  // quoted up to \E: copied as it is
      const std::size_t end = pattern.find("\\E", i + 2);
      const std::size_t stop = end == std::string_view::npos ? pattern.size() : end + 2;
      out += pattern.substr(i, stop - i);
      i = stop;
      continue;
    }
    const std::size_t n = escape_length(pattern, i + 1);
    const std::string_view escape = pattern.substr(i + 1, n);
    const std::string positive = class_items(escape);
    if (!positive.empty()) {
      out += in_class ? positive : "[" + positive + "]";
    } else if (!in_class && (escape == "S" || escape == "P{L}" || escape == "P{N}")) {
      out += "[^" + class_items(escape == "S" ? "s" : escape == "P{L}" ? "p{L}" : "p{N}") + "]";
    } else {
      out += pattern.substr(i, n + 1);
    }
    i += n + 1;
  }
  return out;
}

}  // namespace fsdp::models
