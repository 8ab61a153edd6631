// The BPE model of a tokenizer.json (tokenizers' models/bpe): a vocabulary, merges ranked by their
// place in the list, ignore_merges, and SentencePiece's byte_fallback and unk_token. A pre-token
// becomes one symbol per character (a character missing from the vocabulary: its bytes'
// "<0xXX>" tokens with byte_fallback, else unk_token, runs of them fused into one with
// fuse_unk); the adjacent pair of lowest rank (leftmost on ties) merges until no pair is a
// merge. Results are cached per pre-token, so a large text costs one merge loop per distinct
// word.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fsdp::models {

class JsonPlace;

// Heterogeneous lookup (find by string_view without a copy).
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIds = std::unordered_map<std::string, std::uint32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // From the "model" field at `place`; another model type or an option that changes the
  // result which is not supported here (dropout, a subword prefix or suffix) is an InputError
  // naming the field and its value, as is an unk_token missing from the vocabulary.
  static BpeModel from_json(const nlohmann::json& value, const JsonPlace& place);
  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;
  ~BpeModel();

  // Appends the ids of one pre-token to out. A character that none of the vocabulary, the byte
  // fallback and unk_token covers is an InputError (tokenizers would drop it silently).
  void encode(std::string_view word, std::vector<std::uint32_t>& out) const;

  const TokenIds& vocab() const { return vocab_; }
  // Whether every character has ids: byte_fallback with all 256 byte tokens, or an unk_token.
  bool covers_every_character() const;

 private:
  BpeModel();
  void merge(std::string_view word, std::vector<std::uint32_t>& out) const;

  struct Merge {
    std::uint32_t rank, id;
  };
  struct Cache;
  TokenIds vocab_;
  std::unordered_map<std::uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
  bool ignore_merges_ = false;
  bool byte_fallback_ = false, fuse_unk_ = false;
  std::optional<std::uint32_t> unk_id_;
  std::array<std::optional<std::uint32_t>, 256> byte_ids_;  // "<0xXX>"'s ids, with byte_fallback
  std::unique_ptr<Cache> cache_;
};

}  // namespace fsdp::models
