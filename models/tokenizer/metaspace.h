// tokenizers' Metaspace, both a pre-tokenizer and a decoder (newer SentencePiece-style files:
// {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false}).
// Pre-tokenizing, each space becomes the replacement, and one replacement is put before a piece
// that does not start with it: always, never, or only before the piece at the start of the text
// ("first"); with split, a new piece starts at each run of replacements. Decoding, the
// replacement becomes a space, except in the first token, where it is dropped (unless "never").
#pragma once

#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace fsdp::models {

class JsonPlace;

class Metaspace {
 public:
  // From the object at `place` (its "type" already read as Metaspace); the legacy
  // add_prefix_space is read as tokenizers reads it.
  static Metaspace from_json(const nlohmann::json& value, const JsonPlace& place);

  // Calls emit on each pre-token of `piece`; at_text_start: the piece begins the text.
  void pre_tokenize(std::string_view piece, bool at_text_start,
                    const std::function<void(std::string_view, bool)>& emit) const;
  // The decoder's text of the token at `index` in the decoded sequence.
  std::string decode_token(std::string_view token, std::size_t index) const;

 private:
  enum class Prepend { always, first, never };
  std::string replacement_;  // one character, UTF-8
  Prepend prepend_ = Prepend::always;
  bool split_ = true;
};

}  // namespace fsdp::models
