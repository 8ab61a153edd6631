// tokenizers' Replace with a String pattern, which is both a normalizer (Llama 2's " " -> "▁")
// and a decoder ("▁" -> " "): every occurrence of the pattern, left to right and not overlapping,
// becomes the content.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace fsdp::models {

class JsonPlace;

struct StringReplace {
  // From a {"type": "Replace", "pattern": {"String": ...}, "content": ...} at `place`; a Regex
  // pattern or an empty one is an InputError naming the field.
  static StringReplace from_json(const nlohmann::json& value, const JsonPlace& place);
  std::string apply(std::string_view text) const;

  std::string pattern, content;
};

}  // namespace fsdp::models
