#include "models/tokenizer/post_processor.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "models/tokenizer/json_place.h"

namespace fsdp::models {

using nlohmann::json;

namespace {
constexpr const char* kSupportedPostProcessors =
    "null, ByteLevel, TemplateProcessing, or a Sequence of them";
}

PostProcessor PostProcessor::from_json(const json& value, const JsonPlace& place) {
  PostProcessor p;
  if (!value.is_null()) p.add(value, place);
  return p;
}

void PostProcessor::add(const json& value, const JsonPlace& place) {
  if (!value.is_object() || !value.contains("type"))
    place.unsupported(value, kSupportedPostProcessors);
  const std::string& type = (place / "type").as_string(value["type"]);
  if (type == "Sequence") {
    place.each_in_sequence(value, "processors",
                           [&](const json& v, const JsonPlace& at) { add(v, at); });
  } else if (type == "ByteLevel") {
    // add_prefix_space, trim_offsets and use_regex act on offsets here, never on ids.
    place.check_keys(value, {"type", "add_prefix_space", "trim_offsets", "use_regex"});
  } else if (type == "TemplateProcessing") {
    add_template(value, place);
  } else {
    (place / "type").unsupported(value["type"], kSupportedPostProcessors);
  }
}

void PostProcessor::add_template(const json& value, const JsonPlace& place) {
  place.check_keys(value, {"type", "single", "pair", "special_tokens"});
  if (has_template_) place.unsupported(value["type"], "one TemplateProcessing only");
  has_template_ = true;
  // "pair" is the template of two sequences, which encode (one text) never uses.
  const JsonPlace specials_place = place / "special_tokens";
  const json& specials = place.at(value, "special_tokens");
  if (!specials.is_object()) specials_place.malformed("expected an object");
  const JsonPlace single_place = place / "single";
  const json& single = place.at(value, "single");
  if (!single.is_array()) single_place.malformed("expected an array");
  bool seen_a = false;
  for (std::size_t i = 0; i < single.size(); ++i) {
    const JsonPlace at = single_place[i];
    const json& piece = single[i];
    if (piece.is_object() && piece.size() == 1 && piece.contains("Sequence")) {
      const json& id = (at / "Sequence").at(piece["Sequence"], "id");
      if (id != json("A") || seen_a) (at / "Sequence" / "id").unsupported(id, "\"A\" once");
      seen_a = true;
    } else if (piece.is_object() && piece.size() == 1 && piece.contains("SpecialToken")) {
      const JsonPlace name_place = at / "SpecialToken" / "id";
      const std::string& name =
          name_place.as_string((at / "SpecialToken").at(piece["SpecialToken"], "id"));
      if (!specials.contains(name))
        name_place.malformed(fmt::format("{} is not in special_tokens", short_json(name)));
      const JsonPlace entry = specials_place / name;
      const json& ids = entry.at(specials[name], "ids");
      if (!ids.is_array()) (entry / "ids").malformed("expected an array of ids");
      for (std::size_t k = 0; k < ids.size(); ++k)
        (seen_a ? suffix_ : prefix_).push_back((entry / "ids")[k].as_id(ids[k]));
    } else {
      at.unsupported(piece, "{\"SpecialToken\": ...} or {\"Sequence\": ...}");
    }
  }
  if (!seen_a) single_place.malformed("has no {\"Sequence\": {\"id\": \"A\"}}");
}

std::vector<std::uint32_t> PostProcessor::apply(std::vector<std::uint32_t> ids) const {
  if (prefix_.empty() && suffix_.empty()) return ids;
  std::vector<std::uint32_t> out;
  out.reserve(prefix_.size() + ids.size() + suffix_.size());
  out.insert(out.end(), prefix_.begin(), prefix_.end());
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), suffix_.begin(), suffix_.end());
  return out;
}

}  // namespace fsdp::models
