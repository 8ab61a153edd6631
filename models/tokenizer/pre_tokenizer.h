// The pre_tokenizer of a tokenizer.json: a sequence of steps, each a regex split
// (Split{Regex, Isolated}), a literal split (Split{String, Isolated or MergedWithPrevious}: Gemma's
// Split{" ", MergedWithPrevious}), ByteLevel (GPT-2's regex split when use_regex, then every byte
// to its character, byte_level.h) or Metaspace (metaspace.h); none for null. GPT-2:
// [ByteLevel{use_regex}]. Llama 3: [Split{Llama 3's regex}, ByteLevel{use_regex: false}].
// Llama 2: null (its normalizer does the work). Newer SentencePiece-style files: [Metaspace].
// Gemma: Split{" ", MergedWithPrevious} (after its normalizer's " " -> "▁", a no-op).
// The pieces it yields are what the BPE model merges.
#pragma once

#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/tokenizer/metaspace.h"
#include "models/tokenizer/split_regex.h"

namespace fsdp::models {

// GPT-2's pre-tokenizer regex (tokenizers' byte_level.rs, OpenAI's encoder.py).
extern const char* const kGpt2Regex;

class PreTokenizer {
 public:
  // From the "pre_tokenizer" field at `place`; anything else than the steps above is an
  // InputError naming the field and its value.
  static PreTokenizer from_json(const nlohmann::json& value, const JsonPlace& place);

  // Calls emit on each pre-token of `text` (valid UTF-8), in order; at_text_start: `text` begins
  // the whole text (Metaspace's prepend_scheme "first" prepends only there).
  void run(std::string_view text, bool at_text_start, RegexScratch& scratch,
           const std::function<void(std::string_view)>& emit) const;
  // The pre-tokens of a whole text (tokenizers' pre_tokenize_str), for tests and tools.
  std::vector<std::string> pre_tokenize(std::string_view text) const;
  bool has_byte_level() const;

 private:
  // Split on a literal: every match a piece of its own (Isolated) or joined to the piece before
  // it (MergedWithPrevious: a match right after another match stays a piece of its own).
  struct LiteralSplit {
    std::string pattern;
    bool merged_with_previous = false;
    void split(std::string_view text, const std::function<void(std::string_view)>& emit) const;
  };
  struct Step {
    std::optional<SplitRegex> regex;      // split first, if any
    std::optional<LiteralSplit> literal;  // or on this
    bool byte_level = false;              // then map bytes to characters
    std::optional<Metaspace> metaspace;   // or this alone
  };
  void add_steps(const nlohmann::json& value, const JsonPlace& place);
  void run_from(std::size_t step, std::string_view piece, bool at_text_start, RegexScratch& scratch,
                const std::function<void(std::string_view)>& emit) const;
  std::vector<Step> steps_;
};

}  // namespace fsdp::models
