// UTF-8 as Hugging Face tokenizers treats it: input text must be valid (Rust's str), decoded bytes
// are made valid with String::from_utf8_lossy's rule (each maximal invalid subpart -> U+FFFD).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace fsdp::models {

// The length of the valid UTF-8 sequence at s[i], or 0 if none starts there (Unicode's
// well-formed byte sequences: no overlongs, no surrogates, nothing above U+10FFFF).
std::size_t utf8_sequence_length(std::string_view s, std::size_t i);

// The byte offset of the first byte that is not part of valid UTF-8, or nullopt if s is valid.
std::optional<std::size_t> first_invalid_utf8(std::string_view s);

// Throws InputError "the text is not valid UTF-8: byte 0xFF at offset N" unless s is valid.
void check_utf8(std::string_view s);

// s with every maximal invalid subpart replaced by U+FFFD (Rust's String::from_utf8_lossy).
std::string from_utf8_lossy(std::string_view s);

// The code point of the valid sequence of `length` bytes at s[i].
char32_t decode_utf8(std::string_view s, std::size_t i, std::size_t length);

// Appends the UTF-8 encoding of `c` to out.
void append_utf8(char32_t c, std::string& out);

}  // namespace fsdp::models
