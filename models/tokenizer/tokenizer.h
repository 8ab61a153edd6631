// A BPE tokenizer loaded from a Hugging Face tokenizer.json, byte-level (GPT-2's and Llama 3's
// kind) or SentencePiece-style (Llama 2's, TinyLlama's, Mistral's), whose encode and decode equal
// HF tokenizers' (tests/models/test_tokenizer*.cpp). The pipeline: added tokens split out first,
// the normalizer on the text between them, the pre-tokenizer (regexes through PCRE2, byte-level
// mapping, Metaspace), BPE merges (byte fallback, <unk>), the post-processor's template; decode
// through the decoder's steps. Anything in the file that this does not implement is refused when
// loading, naming the field.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fsdp::models {

struct EncodeOptions {
  // The post-processor's special tokens (Llama 3: <|begin_of_text|> first), as HF's default.
  bool add_special_tokens = true;
  // Special tokens written in the text are ordinary text (HF's split_special_tokens; llm.c's
  // data scripts encode so): "<|endoftext|>" in a document is not the delimiter.
  bool split_special_tokens = false;
};

class Tokenizer {
 public:
  // Reads and checks a tokenizer.json; every error is an InputError naming the file.
  static Tokenizer from_file(const std::string& path);
  // A save_pretrained directory's tokenizer as transformers 5's AutoTokenizer loads it: its
  // tokenizer.json, rebuilt as LlamaTokenizer does where tokenizer_config.json names that class
  // (llama_tokenizer_class.h), else as the file is. A path that is no directory: from_file.
  static Tokenizer from_pretrained(const std::string& path);
  // The same from parsed JSON; `source` names it in errors.
  static Tokenizer from_json(const nlohmann::json& json, const std::string& source);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // The ids of `text` (UTF-8; invalid UTF-8 is an InputError naming the byte offset).
  std::vector<std::uint32_t> encode(std::string_view text, EncodeOptions options = {}) const;
  // The text of `ids`: bytes made valid UTF-8 as from_utf8_lossy does; an id of no token is an
  // InputError.
  std::string decode(std::span<const std::uint32_t> ids, bool skip_special_tokens = false) const;

  // The pre-tokens of `text` as the pre-tokenizer alone gives them (tokenizers'
  // pre_tokenize_str: no added-token split, no normalizer; the whole text with none).
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  std::optional<std::uint32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(std::uint32_t id) const;
  bool is_special(std::uint32_t id) const;
  // One more than the largest id (GPT-2: 50257, Llama 3: 128256).
  std::uint32_t vocab_size() const;
  const std::string& source() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdp::models
