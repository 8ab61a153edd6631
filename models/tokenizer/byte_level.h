// GPT-2's byte <-> unicode table (tokenizers' bytes_char): every byte gets a printable character,
// so that BPE works on strings. Bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF stand for themselves;
// the other 68, in increasing order, map to U+0100 + n (space -> U+0120 'Ġ', '\n' -> U+010A 'Ċ').
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace fsdp::models {

// Appends the byte-level form of `bytes` (each byte's character, UTF-8 encoded) to out.
void append_byte_level(std::string_view bytes, std::string& out);

// The byte a character of the table stands for, or nullopt for a character outside it.
std::optional<unsigned char> byte_of_char(char32_t c);

// The ByteLevel decoder's bytes of one token: each character's byte, or the token's own UTF-8
// when any character is outside the table (tokenizers' decode_chain), appended to out.
void append_token_bytes(std::string_view token, std::string& out);

}  // namespace fsdp::models
