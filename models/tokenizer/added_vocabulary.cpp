#include "models/tokenizer/added_vocabulary.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/input_error.h"
#include "models/tokenizer/json_place.h"
#include "models/tokenizer/utf8.h"

namespace fsdp::models {

using nlohmann::json;

namespace {

// Rust's char::is_whitespace (Unicode's White_Space), which tokenizers' lstrip and rstrip use.
bool is_white_space(char32_t c) {
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// The offset where the whitespace that ends text[0, end) begins (end if none).
std::size_t whitespace_before(std::string_view text, std::size_t end) {
  std::size_t begin = end;
  while (begin > 0) {
    std::size_t k = begin - 1;
    while (k > 0 && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) --k;
    const std::size_t n = utf8_sequence_length(text, k);
    if (n == 0 || !is_white_space(decode_utf8(text, k, n))) break;
    begin = k;
  }
  return begin;
}

// The offset where the whitespace that starts at text[begin] ends (begin if none).
std::size_t whitespace_after(std::string_view text, std::size_t begin) {
  while (begin < text.size()) {
    const std::size_t n = utf8_sequence_length(text, begin);
    if (n == 0 || !is_white_space(decode_utf8(text, begin, n))) break;
    begin += n;
  }
  return begin;
}

}  // namespace

AddedVocabulary AddedVocabulary::from_json(const json& value, const JsonPlace& place,
                                           const Normalizer& normalizer) {
  AddedVocabulary v;
  if (!value.is_array()) place.malformed("expected an array");
  for (std::size_t i = 0; i < value.size(); ++i) {
    const JsonPlace at = place[i];
    const json& t = value[i];
    at.check_keys(t, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"});
    AddedToken token{(at / "id").as_id(at.at(t, "id")),
                     (at / "content").as_string(at.at(t, "content")),
                     false,
                     false,
                     false,
                     false,
                     ""};
    if (token.content.empty()) (at / "content").unsupported(t["content"], "a non-empty string");
    if (t.contains("single_word") && (at / "single_word").as_bool(t["single_word"]))
      (at / "single_word").unsupported(t["single_word"], "false only");
    token.lstrip = t.contains("lstrip") && (at / "lstrip").as_bool(t["lstrip"]);
    token.rstrip = t.contains("rstrip") && (at / "rstrip").as_bool(t["rstrip"]);
    token.special = t.contains("special") && (at / "special").as_bool(t["special"]);
    // tokenizers' default: a special token is matched as written, another one normalized.
    token.normalized =
        t.contains("normalized") ? (at / "normalized").as_bool(t["normalized"]) : !token.special;
    token.pattern = token.normalized ? normalizer.normalize(token.content) : token.content;
    if (token.pattern.empty())
      (at / "content")
          .malformed(fmt::format("{} is empty once normalized", short_json(t["content"])));
    if (v.find(token.content))
      (at / "content").malformed(fmt::format("{} is added twice", short_json(token.content)));
    v.tokens_.push_back(std::move(token));
  }
  for (std::size_t k = 0; k < v.tokens_.size(); ++k) {
    const AddedToken& t = v.tokens_[k];
    v.by_first_byte_[t.normalized ? 1 : 0][static_cast<unsigned char>(t.pattern[0])].push_back(k);
  }
  return v;
}

void AddedVocabulary::check_ids(
    const std::function<std::optional<std::uint32_t>(std::string_view)>& model_id,
    std::size_t model_vocab_size, const JsonPlace& place) const {
  std::optional<std::uint32_t> max_added;  // tokenizers' added_tokens_map.values().max()
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    std::uint32_t id;
    if (auto known = model_id(t.content))
      id = *known;
    else if (!max_added || (*max_added < model_vocab_size && model_vocab_size > 0))
      id = std::uint32_t(model_vocab_size);
    else
      id = *max_added + 1;
    max_added = std::max(max_added.value_or(0), id);
    if (id != t.id) {
      const JsonPlace at = place[i] / "id";
      throw InputError(fmt::format(
          "{}: {} is {}, but Hugging Face tokenizers gives {} the id {} (a model token's id, or "
          "the next one after the model's {} tokens)",
          at.file(), at.path(), t.id, short_json(t.content), id, model_vocab_size));
    }
  }
}

const AddedToken* AddedVocabulary::find(std::string_view content) const {
  for (const AddedToken& t : tokens_)
    if (t.content == content) return &t;
  return nullptr;
}

const AddedToken* AddedVocabulary::longest_at(std::string_view text, std::size_t i,
                                              int pass) const {
  const AddedToken* best = nullptr;
  for (std::size_t k : by_first_byte_[pass][static_cast<unsigned char>(text[i])]) {
    const AddedToken& t = tokens_[k];
    if ((!best || t.pattern.size() > best->pattern.size()) && text.substr(i).starts_with(t.pattern))
      best = &t;
  }
  return best;
}

void AddedVocabulary::split_pass(std::string_view text, int pass, bool split_special_tokens,
                                 const std::function<void(std::string_view, std::size_t)>& on_text,
                                 const std::function<void(std::uint32_t)>& on_token) const {
  std::size_t start = 0;  // of the text not yet given out
  for (std::size_t i = 0; i < text.size();) {
    const AddedToken* t = longest_at(text, i, pass);
    if (!t) {
      ++i;
      continue;
    }
    // tokenizers (encode_special_tokens) still consumes the match, then leaves it as text.
    if (!(split_special_tokens && t->special)) {
      // lstrip and rstrip take the whitespace around the match into the token (tokenizers'
      // find_matches: never whitespace an earlier token took; the search goes on after the
      // match itself).
      std::size_t from = i, to = i + t->pattern.size();
      if (t->lstrip) from = std::max(whitespace_before(text, i), start);
      if (t->rstrip) to = whitespace_after(text, to);
      if (from > start) on_text(text.substr(start, from - start), start);
      on_token(t->id);
      start = to;
    }
    i += t->pattern.size();
  }
  if (start < text.size()) on_text(text.substr(start), start);
}

void AddedVocabulary::split(std::string_view text, bool split_special_tokens,
                            const Normalizer& normalizer,
                            const std::function<void(std::string_view, bool)>& on_text,
                            const std::function<void(std::uint32_t)>& on_token) const {
  split_pass(
      text, 0, split_special_tokens,
      [&](std::string_view rest, std::size_t offset) {
        auto second_pass = [&](std::string_view normalized) {
          split_pass(
              normalized, 1, split_special_tokens,
              [&](std::string_view piece, std::size_t at) { on_text(piece, offset + at == 0); },
              on_token);
        };
        if (normalizer.is_identity()) return second_pass(rest);
        const std::string normalized = normalizer.normalize(rest);
        second_pass(normalized);
      },
      on_token);
}

}  // namespace fsdp::models
