// llm.c's token files (dev/data/data_common.py): a header of 256 little-endian int32 (magic,
// version, token count, zeros), then the tokens. GPT-2: magic 20240520, version 1, uint16 tokens;
// Llama 3: magic 20240801, version 7, uint32 tokens. examples/finetune reads them, tokenize
// writes them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fsdp::models {

enum class TokenFormat { gpt2, llama3 };

struct TokenFile {
  // Widened to uint32 whatever the file's width: one element type for both formats. Read whole
  // into memory rather than mapped: llm.c's shards are 10^8 tokens (at most 400 MB here).
  std::vector<std::uint32_t> tokens;
  TokenFormat format;
};

// Reads and checks a token file: its size (1024 + count * token bytes), magic, version, and with
// a vocab_size every token below it. Each error is an InputError naming the file and the fault.
TokenFile read_token_file(const std::string& path,
                          std::optional<std::uint32_t> vocab_size = std::nullopt);

// Writes `tokens` in `format`; a token too wide for the format (gpt2: >= 65536) or more than
// 2^31 - 1 tokens is an InputError, as is a file that cannot be written.
void write_token_file(const std::string& path, std::span<const std::uint32_t> tokens,
                      TokenFormat format);

// "gpt2" / "llama3".
std::string_view token_format_name(TokenFormat format);
// The format of a name ("gpt2", "llama3"), or nullopt.
std::optional<TokenFormat> token_format_from_name(std::string_view name);
// The format for a vocabulary: gpt2 (uint16) when every id fits 16 bits, else llama3 (uint32).
TokenFormat token_format_for_vocab(std::uint32_t vocab_size);

}  // namespace fsdp::models
