// The added_tokens of a tokenizer.json (tokenizers' added_vocabulary.rs): found in the text before
// pre-tokenization, leftmost-longest, and mapped straight to their ids. Two passes as tokenizers
// makes them: first the tokens with normalized=false (special tokens by default) in the text,
// then each stretch left is normalized and the tokens with normalized=true are found in it, as
// their content normalized (Llama 2's normalizer: "<x>" is found as "▁<x>", and decoded so).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/tokenizer/normalizer.h"

namespace fsdp::models {

class JsonPlace;

struct AddedToken {
  std::uint32_t id;
  std::string content;
  bool special, normalized;
  bool lstrip, rstrip;  // the whitespace before / after a match is part of the token
  // What is searched for and what decode gives the decoder: the content, normalized when
  // `normalized` (tokenizers' normalized_cache).
  std::string pattern;
};

class AddedVocabulary {
 public:
  // From the "added_tokens" field at `place`; single_word set is an InputError.
  static AddedVocabulary from_json(const nlohmann::json& value, const JsonPlace& place,
                                   const Normalizer& normalizer);

  // Splits `text` into its added tokens (on_token(id)) and the normalized, non-empty text
  // between them (on_text, with whether it begins the text), in order. With
  // split_special_tokens, special tokens are left in the text as ordinary text.
  void split(std::string_view text, bool split_special_tokens, const Normalizer& normalizer,
             const std::function<void(std::string_view, bool)>& on_text,
             const std::function<void(std::uint32_t)>& on_token) const;

  // Refuses an id that HF tokenizers would not give the token on loading: it keeps a model
  // token's id and numbers the others on from the model's vocabulary, whatever the file says
  // (then warns), so a file that disagrees is ambiguous.
  void check_ids(const std::function<std::optional<std::uint32_t>(std::string_view)>& model_id,
                 std::size_t model_vocab_size, const JsonPlace& place) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* find(std::string_view content) const;

 private:
  // The added token of `pass` (0: normalized=false, 1: normalized=true) that starts at text[i]
  // and is the longest there, or nullptr.
  const AddedToken* longest_at(std::string_view text, std::size_t i, int pass) const;
  // on_text gets each stretch between tokens and its offset in `text`.
  void split_pass(std::string_view text, int pass, bool split_special_tokens,
                  const std::function<void(std::string_view, std::size_t)>& on_text,
                  const std::function<void(std::uint32_t)>& on_token) const;

  std::vector<AddedToken> tokens_;
  std::vector<std::size_t> by_first_byte_[2][256];  // indices into tokens_, per pass
};

}  // namespace fsdp::models
