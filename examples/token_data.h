// A job's training tokens, as the data order (gpt_data.h) reads them: the bytes of a text file
// (train_gpt's byte-level GPT: each byte is a token) or the ids of a token file (finetune's
// Hugging Face models, llm.c's format). Shared, immutable and cheap to copy; the job's agreement
// and its checkpoints' identity hash the raw bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fsdp::examples {

class TokenData {
 public:
  TokenData() = default;
  // Bytes: token i is byte i (0..255). Implicit: a job's data is its text.
  TokenData(std::shared_ptr<const std::string> bytes) : bytes_(std::move(bytes)) {}  // NOLINT
  // Token ids (from a token file).
  explicit TokenData(std::shared_ptr<const std::vector<std::uint32_t>> ids)
      : ids_(std::move(ids)) {}

  explicit operator bool() const { return bytes_ != nullptr || ids_ != nullptr; }
  // Tokens held.
  std::int64_t size() const;
  std::uint32_t operator[](std::int64_t i) const {
    return bytes_ ? static_cast<unsigned char>((*bytes_)[static_cast<std::size_t>(i)])
                  : (*ids_)[static_cast<std::size_t>(i)];
  }
  // "bytes" or "tokens": what size() counts, in messages.
  const char* unit() const { return bytes_ ? "bytes" : "tokens"; }
  // The data's own bytes, for hashing.
  std::string_view raw() const;

 private:
  std::shared_ptr<const std::string> bytes_;
  std::shared_ptr<const std::vector<std::uint32_t>> ids_;
};

// `count` token ids drawn uniformly from [0, vocab) by a generator seeded with `seed` (train_gpt's
// --synthetic-tokens: data for timing, the same on every rank and every run with that seed).
TokenData uniform_tokens(std::int64_t count, std::int64_t vocab, std::uint64_t seed);

}  // namespace fsdp::examples
