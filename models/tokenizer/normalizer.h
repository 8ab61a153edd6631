// The normalizer of a tokenizer.json, as SentencePiece-style files converted by transformers'
// LlamaConverter (Llama 2, TinyLlama, Mistral 7B v0.1) have it: Sequence[Prepend("▁"),
// Replace(" " -> "▁")], or Qwen2's NFC (and NFD). It acts on each stretch of text
// between added tokens (a "▁" before every stretch that is not empty), and on the content of added
// tokens with normalized=true.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "models/tokenizer/string_replace.h"
#include "models/tokenizer/unicode_normalization.h"

namespace fsdp::models {

class JsonPlace;

class Normalizer {
 public:
  // From the "normalizer" field at `place`: null, Prepend, Replace with a String pattern, NFC,
  // NFD, or a Sequence of them; any other is an InputError naming the field and its
  // value.
  static Normalizer from_json(const nlohmann::json& value, const JsonPlace& place);

  bool is_identity() const { return steps_.empty(); }
  std::string normalize(std::string_view text) const;

 private:
  struct Prepend {
    std::string prefix;
  };
  void add(const nlohmann::json& value, const JsonPlace& place);
  std::vector<std::variant<Prepend, StringReplace, UnicodeForm>> steps_;
};

}  // namespace fsdp::models
