#include "models/tokenizer/metaspace.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "models/tokenizer/json_place.h"
#include "models/tokenizer/utf8.h"

namespace fsdp::models {

using nlohmann::json;

Metaspace Metaspace::from_json(const json& value, const JsonPlace& place) {
  place.check_keys(
      value, {"type", "replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"});
  Metaspace m;
  const JsonPlace replacement_place = place / "replacement";
  m.replacement_ = replacement_place.as_string(place.at(value, "replacement"));
  if (m.replacement_.empty() || utf8_sequence_length(m.replacement_, 0) != m.replacement_.size())
    replacement_place.malformed(
        fmt::format("expected one character, got {}", short_json(value["replacement"])));
  if (value.contains("prepend_scheme")) {
    const JsonPlace scheme_place = place / "prepend_scheme";
    const std::string& scheme = scheme_place.as_string(value["prepend_scheme"]);
    if (scheme == "always")
      m.prepend_ = Prepend::always;
    else if (scheme == "first")
      m.prepend_ = Prepend::first;
    else if (scheme == "never")
      m.prepend_ = Prepend::never;
    else
      scheme_place.unsupported(value["prepend_scheme"], "\"always\", \"first\" or \"never\"");
  }
  // Files from before prepend_scheme: add_prefix_space false means "never", and tokenizers
  // refuses it beside any other scheme (the default "always" included).
  if (value.contains("add_prefix_space") &&
      !(place / "add_prefix_space").as_bool(value["add_prefix_space"])) {
    if (m.prepend_ != Prepend::never)
      (place / "add_prefix_space")
          .malformed("false does not match prepend_scheme (it needs \"never\")");
  }
  if (value.contains("split")) m.split_ = (place / "split").as_bool(value["split"]);
  // str_rep is the replacement again, written by old versions; tokenizers ignores it.
  if (value.contains("str_rep")) (place / "str_rep").as_string(value["str_rep"]);
  return m;
}

void Metaspace::pre_tokenize(std::string_view piece, bool at_text_start,
                             const std::function<void(std::string_view, bool)>& emit) const {
  std::string s;
  s.reserve(piece.size() + replacement_.size());
  for (char c : piece) {
    if (c == ' ')
      s += replacement_;
    else
      s += c;
  }
  const bool prepend =
      !s.starts_with(replacement_) &&
      (prepend_ == Prepend::always || (prepend_ == Prepend::first && at_text_start));
  // tokenizers prepends only to a non-empty piece.
  if (prepend && !s.empty()) s.insert(0, replacement_);
  if (!split_) {
    if (!s.empty()) emit(s, at_text_start);
    return;
  }
  // Split "MergedWithNext": a piece starts at each run of replacements.
  const std::string_view text = s;
  std::size_t start = 0;
  bool first = true, previous_is_replacement = false;
  for (std::size_t i = 0; i < text.size();) {
    const bool is_replacement = text.substr(i).starts_with(replacement_);
    if (is_replacement && !previous_is_replacement && i > 0) {
      emit(text.substr(start, i - start), first && at_text_start);
      first = false;
      start = i;
    }
    previous_is_replacement = is_replacement;
    const std::size_t n = utf8_sequence_length(text, i);
    i += n ? n : 1;
  }
  if (start < text.size()) emit(text.substr(start), first && at_text_start);
}

std::string Metaspace::decode_token(std::string_view token, std::size_t index) const {
  const bool drop = index == 0 && prepend_ != Prepend::never;
  std::string out;
  out.reserve(token.size());
  for (std::size_t i = 0; i < token.size();) {
    if (token.substr(i).starts_with(replacement_)) {
      if (!drop) out += ' ';
      i += replacement_.size();
    } else {
      out += token[i++];
    }
  }
  return out;
}

}  // namespace fsdp::models
