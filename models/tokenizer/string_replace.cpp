#include "models/tokenizer/string_replace.h"

#include <nlohmann/json.hpp>

#include "models/tokenizer/json_place.h"

namespace fsdp::models {

using nlohmann::json;

StringReplace StringReplace::from_json(const json& value, const JsonPlace& place) {
  place.check_keys(value, {"type", "pattern", "content"});
  const json& pattern = place.at(value, "pattern");
  if (!pattern.is_object() || pattern.size() != 1 || !pattern.contains("String"))
    (place / "pattern").unsupported(pattern, "a {\"String\": ...} pattern");
  StringReplace r{(place / "pattern" / "String").as_string(pattern["String"]),
                  (place / "content").as_string(place.at(value, "content"))};
  // tokenizers matches an empty pattern as an empty regex would, between every character.
  if (r.pattern.empty())
    (place / "pattern" / "String").unsupported(pattern["String"], "a non-empty string");
  return r;
}

std::string StringReplace::apply(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  std::size_t from = 0;
  for (std::size_t at; (at = text.find(pattern, from)) != std::string_view::npos;
       from = at + pattern.size()) {
    out.append(text.substr(from, at - from));
    out.append(content);
  }
  out.append(text.substr(from));
  return out;
}

}  // namespace fsdp::models
