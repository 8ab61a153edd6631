#include "models/tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "core/input_error.h"
#include "models/tokenizer/added_vocabulary.h"
#include "models/tokenizer/bpe_model.h"
#include "models/tokenizer/decoder.h"
#include "models/tokenizer/json_file.h"
#include "models/tokenizer/json_place.h"
#include "models/tokenizer/normalizer.h"
#include "models/tokenizer/post_processor.h"
#include "models/tokenizer/pre_tokenizer.h"
#include "models/tokenizer/utf8.h"

namespace fsdp::models {

using nlohmann::json;

struct Tokenizer::Impl {
  std::string source;
  Normalizer normalizer;
  AddedVocabulary added;
  PreTokenizer pre_tokenizer;
  BpeModel model;
  PostProcessor post_processor;
  Decoder decoder;
  // By id: the token's text (added tokens first, as tokenizers looks them up), what decode gives
  // the decoder (a normalized added token's normalized form), whether it is special, and whether
  // skip_special_tokens leaves it out (tokenizers: its decoded string is a special token's). A
  // map: ids may have holes, and a vector sized by a stray large id would not fit.
  struct Entry {
    const std::string* text;
    const std::string* decoded;
    bool special, skipped;
  };
  std::unordered_map<std::uint32_t, Entry> tokens;
  std::uint32_t max_id = 0;
  const Entry* find(std::uint32_t id) const {
    auto it = tokens.find(id);
    return it == tokens.end() ? nullptr : &it->second;
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::string& path) {
  return from_json(read_json_file(path), path);
}

Tokenizer Tokenizer::from_json(const json& j, const std::string& source) {
  const JsonPlace top(source);
  top.check_keys(j, {"version", "truncation", "padding", "added_tokens", "normalizer",
                     "pre_tokenizer", "post_processor", "decoder", "model"});
  if (j.contains("version") && j["version"] != json("1.0"))
    (top / "version").unsupported(j["version"], "\"1.0\" only");
  for (const char* key : {"truncation", "padding"})
    if (j.contains(key) && !j[key].is_null()) (top / key).unsupported(j[key], "null only");
  const json null;
  Normalizer normalizer =
      Normalizer::from_json(j.contains("normalizer") ? j["normalizer"] : null, top / "normalizer");
  AddedVocabulary added =
      j.contains("added_tokens")
          ? AddedVocabulary::from_json(j["added_tokens"], top / "added_tokens", normalizer)
          : AddedVocabulary{};
  auto impl = std::unique_ptr<Impl>(
      new Impl{source,
               std::move(normalizer),
               std::move(added),
               PreTokenizer::from_json(top.at(j, "pre_tokenizer"), top / "pre_tokenizer"),
               BpeModel::from_json(top.at(j, "model"), top / "model"),
               PostProcessor::from_json(j.value("post_processor", json()), top / "post_processor"),
               Decoder::from_json(top.at(j, "decoder"), top / "decoder"),
               {},
               {}});
  Impl& t = *impl;
  // Without GPT-2's byte mapping, a character outside the vocabulary would be dropped by
  // tokenizers (refused here when met): refuse a file where that can happen to any text.
  if (!t.pre_tokenizer.has_byte_level() && !t.model.covers_every_character())
    (top / "pre_tokenizer")
        .unsupported(j["pre_tokenizer"],
                     "without a ByteLevel step, the model needs byte_fallback with the 256 "
                     "<0xXX> tokens, or an unk_token");
  t.added.check_ids(
      [&](std::string_view content) -> std::optional<std::uint32_t> {
        auto it = t.model.vocab().find(content);
        if (it == t.model.vocab().end()) return std::nullopt;
        return it->second;
      },
      t.model.vocab().size(), top / "added_tokens");
  std::unordered_set<std::string_view> specials;
  for (const AddedToken& a : t.added.tokens())
    if (a.special) specials.insert(a.content);
  auto set = [&](std::uint32_t id, const std::string* text, const std::string* decoded,
                 bool special) {
    t.tokens[id] = {text, decoded, special, specials.contains(*decoded)};
    t.max_id = std::max(t.max_id, id);
  };
  for (const auto& [text, id] : t.model.vocab()) set(id, &text, &text, false);
  for (const AddedToken& a : t.added.tokens()) set(a.id, &a.content, &a.pattern, a.special);
  for (const auto* ids : {&t.post_processor.prefix(), &t.post_processor.suffix()})
    for (std::uint32_t id : *ids)
      if (!t.find(id))
        (top / "post_processor")
            .malformed(fmt::format("the template's token id {} is not in the vocabulary", id));
  return Tokenizer(std::move(impl));
}

std::vector<std::uint32_t> Tokenizer::encode(std::string_view text, EncodeOptions options) const {
  check_utf8(text);
  std::vector<std::uint32_t> ids;
  RegexScratch scratch;
  auto on_piece = [&](std::string_view word) { impl_->model.encode(word, ids); };
  impl_->added.split(
      text, options.split_special_tokens, impl_->normalizer,
      [&](std::string_view segment, bool at_text_start) {
        impl_->pre_tokenizer.run(segment, at_text_start, scratch, on_piece);
      },
      [&](std::uint32_t id) { ids.push_back(id); });
  if (options.add_special_tokens) return impl_->post_processor.apply(std::move(ids));
  return ids;
}

std::string Tokenizer::decode(std::span<const std::uint32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::uint32_t id = ids[i];
    const Impl::Entry* entry = impl_->find(id);
    if (!entry)
      throw InputError(fmt::format("{}: token id {} (at index {}) is not in the vocabulary",
                                   impl_->source, id, i));
    if (skip_special_tokens && entry->skipped) continue;
    tokens.push_back(*entry->decoded);
  }
  return impl_->decoder.decode(std::move(tokens));
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
  check_utf8(text);
  return impl_->pre_tokenizer.pre_tokenize(text);
}

std::optional<std::uint32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const AddedToken* a = impl_->added.find(token)) return a->id;
  auto it = impl_->model.vocab().find(token);
  if (it == impl_->model.vocab().end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> Tokenizer::id_to_token(std::uint32_t id) const {
  const Impl::Entry* entry = impl_->find(id);
  if (!entry) return std::nullopt;
  return *entry->text;
}

bool Tokenizer::is_special(std::uint32_t id) const {
  const Impl::Entry* entry = impl_->find(id);
  return entry && entry->special;
}

std::uint32_t Tokenizer::vocab_size() const {
  return impl_->tokens.empty() ? 0 : impl_->max_id + 1;
}

const std::string& Tokenizer::source() const {
  return impl_->source;
}

}  // namespace fsdp::models
