#include "models/tokenizer/normalizer.h"

#include <nlohmann/json.hpp>

#include "models/tokenizer/json_place.h"

namespace fsdp::models {

using nlohmann::json;

namespace {
constexpr const char* kSupportedNormalizers =
    "null, Prepend, Replace, NFC, NFD, or a Sequence of them";
}

Normalizer Normalizer::from_json(const json& value, const JsonPlace& place) {
  Normalizer n;
  if (!value.is_null()) n.add(value, place);
  return n;
}

void Normalizer::add(const json& value, const JsonPlace& place) {
  if (!value.is_object() || !value.contains("type"))
    place.unsupported(value, kSupportedNormalizers);
  const std::string& type = (place / "type").as_string(value["type"]);
  if (type == "Sequence") {
    place.each_in_sequence(value, "normalizers",
                           [&](const json& v, const JsonPlace& at) { add(v, at); });
  } else if (type == "Prepend") {
    place.check_keys(value, {"type", "prepend"});
    steps_.emplace_back(Prepend{(place / "prepend").as_string(place.at(value, "prepend"))});
  } else if (type == "Replace") {
    steps_.emplace_back(StringReplace::from_json(value, place));
  } else if (type == "NFC" || type == "NFD") {
    place.check_keys(value, {"type"});
    steps_.emplace_back(type == "NFC" ? UnicodeForm::nfc : UnicodeForm::nfd);
  } else {
    place.unsupported(value, kSupportedNormalizers);
  }
}

std::string Normalizer::normalize(std::string_view text) const {
  std::string s(text);
  for (const auto& step : steps_) {
    if (const auto* p = std::get_if<Prepend>(&step)) {
      if (!s.empty()) s.insert(0, p->prefix);  // tokenizers leaves an empty text empty
    } else if (const auto* r = std::get_if<StringReplace>(&step)) {
      s = r->apply(s);
    } else {
      s = normalize_unicode(s, std::get<UnicodeForm>(step));
    }
  }
  return s;
}

}  // namespace fsdp::models
