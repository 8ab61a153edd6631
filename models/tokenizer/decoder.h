// The decoder of a tokenizer.json: the steps that turn the tokens of the ids into text, each
// acting on the list of token strings as tokenizers' decode_chain does. Byte-level files
// (GPT-2, Llama 3): ByteLevel. SentencePiece-style files (Llama 2, TinyLlama, Mistral):
// Sequence[Replace("▁" -> " "), ByteFallback, Fuse, Strip(" ", 1, 0)], or Metaspace.
#pragma once

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <variant>
#include <vector>

#include "models/tokenizer/metaspace.h"
#include "models/tokenizer/string_replace.h"

namespace fsdp::models {

class JsonPlace;

class Decoder {
 public:
  // From the "decoder" field at `place`; null or another decoder is an InputError naming the
  // field and its value.
  static Decoder from_json(const nlohmann::json& value, const JsonPlace& place);

  // The text of `tokens` (each token's string as tokenizers' decode gives it to the decoder).
  std::string decode(std::vector<std::string> tokens) const;

 private:
  // Every token's characters back to GPT-2's bytes, made valid UTF-8 as from_utf8_lossy does.
  struct ByteLevel {};
  // Runs of "<0xXX>" tokens to their bytes; a run that is not valid UTF-8 gives U+FFFD a byte.
  struct ByteFallback {};
  struct Fuse {};  // all tokens into one
  struct Strip {   // up to `start` leading and `stop` trailing `content` characters of each token
    std::string content;
    std::size_t start, stop;
  };
  using Step = std::variant<ByteLevel, StringReplace, ByteFallback, Fuse, Strip, Metaspace>;
  void add(const nlohmann::json& value, const JsonPlace& place);
  std::vector<Step> steps_;
};

}  // namespace fsdp::models
