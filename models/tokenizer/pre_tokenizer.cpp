#include "models/tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include "models/tokenizer/byte_level.h"
#include "models/tokenizer/json_place.h"

namespace fsdp::models {

using nlohmann::json;

const char* const kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {
constexpr const char* kSupportedPreTokenizers =
    "null, ByteLevel, Metaspace, Split with a Regex and behavior Isolated, Split with a String and "
    "behavior Isolated or MergedWithPrevious, or a Sequence of them";
}

PreTokenizer PreTokenizer::from_json(const json& value, const JsonPlace& place) {
  PreTokenizer p;
  if (!value.is_null()) p.add_steps(value, place);
  return p;
}

bool PreTokenizer::has_byte_level() const {
  for (const Step& s : steps_)
    if (s.byte_level) return true;
  return false;
}

void PreTokenizer::add_steps(const json& value, const JsonPlace& place) {
  if (!value.is_object() || !value.contains("type"))
    place.unsupported(value, kSupportedPreTokenizers);
  const std::string& type = place.as_string(value["type"]);
  if (type == "Sequence") {
    place.each_in_sequence(value, "pretokenizers",
                           [&](const json& v, const JsonPlace& at) { add_steps(v, at); });
  } else if (type == "ByteLevel") {
    place.check_keys(value, {"type", "add_prefix_space", "trim_offsets", "use_regex"});
    // trim_offsets changes only the offsets of the encoding, never its ids.
    if (!value.contains("add_prefix_space") ||
        (place / "add_prefix_space").as_bool(value["add_prefix_space"]))
      (place / "add_prefix_space")
          .unsupported(value.value("add_prefix_space", json(true)), "false only");
    const bool use_regex =
        !value.contains("use_regex") || (place / "use_regex").as_bool(value["use_regex"]);
    Step step;
    if (use_regex) step.regex.emplace(kGpt2Regex, place);
    step.byte_level = true;
    steps_.push_back(std::move(step));
  } else if (type == "Split") {
    place.check_keys(value, {"type", "pattern", "behavior", "invert"});
    const json& pattern = place.at(value, "pattern");
    const bool literal = pattern.is_object() && pattern.contains("String");
    if (!pattern.is_object() || !(literal || pattern.contains("Regex")))
      (place / "pattern").unsupported(pattern, "a {\"Regex\": ...} or {\"String\": ...} pattern");
    const json& behavior = place.at(value, "behavior");
    const std::string& how = (place / "behavior").as_string(behavior);
    const bool merged = literal && how == "MergedWithPrevious";
    if (how != "Isolated" && !merged)
      (place / "behavior")
          .unsupported(behavior, literal ? "Isolated or MergedWithPrevious" : "Isolated only");
    if (value.contains("invert") && (place / "invert").as_bool(value["invert"]))
      (place / "invert").unsupported(value["invert"], "false only");
    Step step;
    if (literal) {
      const JsonPlace string_place = place / "pattern" / "String";
      const std::string& text = string_place.as_string(pattern["String"]);
      if (text.empty()) string_place.unsupported(pattern["String"], "a non-empty string");
      step.literal = LiteralSplit{text, merged};
    } else {
      const JsonPlace regex_place = place / "pattern" / "Regex";
      step.regex.emplace(regex_place.as_string(pattern["Regex"]), regex_place);
    }
    steps_.push_back(std::move(step));
  } else if (type == "Metaspace") {
    Step step;
    step.metaspace = Metaspace::from_json(value, place);
    steps_.push_back(std::move(step));
  } else {
    (place / "type").unsupported(value["type"], kSupportedPreTokenizers);
  }
}

void PreTokenizer::run(std::string_view text, bool at_text_start, RegexScratch& scratch,
                       const std::function<void(std::string_view)>& emit) const {
  run_from(0, text, at_text_start, scratch, emit);
}

void PreTokenizer::run_from(std::size_t step, std::string_view piece, bool at_text_start,
                            RegexScratch& scratch,
                            const std::function<void(std::string_view)>& emit) const {
  if (step == steps_.size()) {
    emit(piece);
    return;
  }
  const Step& s = steps_[step];
  if (s.metaspace) {
    s.metaspace->pre_tokenize(piece, at_text_start, [&](std::string_view part, bool at_start) {
      run_from(step + 1, part, at_start, scratch, emit);
    });
    return;
  }
  bool first = true;  // only the first piece of a split starts where `piece` starts
  auto after_split = [&](std::string_view part) {
    const bool at_start = at_text_start && first;
    first = false;
    if (!s.byte_level) return run_from(step + 1, part, at_start, scratch, emit);
    std::string mapped;
    append_byte_level(part, mapped);
    run_from(step + 1, mapped, at_start, scratch, emit);
  };
  if (s.regex)
    s.regex->split(piece, scratch, after_split);
  else if (s.literal)
    s.literal->split(piece, after_split);
  else
    after_split(piece);
}

void PreTokenizer::LiteralSplit::split(std::string_view text,
                                       const std::function<void(std::string_view)>& emit) const {
  // tokenizers' SplitDelimiterBehavior over non-overlapping matches, left to right; empty pieces
  // left out.
  std::size_t start = 0;  // of the piece not yet emitted
  bool after_match = false;
  for (std::size_t at = text.find(pattern); at != std::string_view::npos;
       at = text.find(pattern, at + pattern.size())) {
    const std::size_t end = at + pattern.size();
    if (merged_with_previous && !(after_match && start == at)) {
      emit(text.substr(start, end - start));  // the gap before it and the match
    } else {
      if (at > start) emit(text.substr(start, at - start));
      emit(text.substr(at, pattern.size()));
    }
    start = end;
    after_match = true;
  }
  if (start < text.size()) emit(text.substr(start));
}

std::vector<std::string> PreTokenizer::pre_tokenize(std::string_view text) const {
  std::vector<std::string> out;
  RegexScratch scratch;
  // tokenizers' pre-tokenizers leave out empty pieces (an empty text has none).
  if (!text.empty())
    run(text, /*at_text_start=*/true, scratch, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

}  // namespace fsdp::models
