#include "models/tokenizer/added_vocabulary.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/input_error.h"
#include "models/tokenizer/json_place.h"

namespace fsdp::models {

using nlohmann::json;

AddedVocabulary AddedVocabulary::from_json(const json& value, const JsonPlace& place,
                                           const Normalizer& normalizer) {
  AddedVocabulary v;
  if (!value.is_array()) place.malformed("expected an array");
  for (std::size_t i = 0; i < value.size(); ++i) {
    const JsonPlace at = place[i];
    const json& t = value[i];
    at.check_keys(t, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"});
    AddedToken token{(at / "id").as_id(at.at(t, "id")),
                     (at / "content").as_string(at.at(t, "content")), false, false, ""};
    if (token.content.empty()) (at / "content").unsupported(t["content"], "a non-empty string");
    for (const char* key : {"single_word", "lstrip", "rstrip"})
      if (t.contains(key) && (at / key).as_bool(t[key]))
        (at / key).unsupported(t[key], "false only");
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
      if (i > start) on_text(text.substr(start, i - start), start);
      on_token(t->id);
      start = i + t->pattern.size();
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
