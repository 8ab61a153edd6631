#include "models/tokenizer/decoder.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>

#include "models/tokenizer/byte_level.h"
#include "models/tokenizer/json_place.h"
#include "models/tokenizer/utf8.h"

namespace fsdp::models {

using nlohmann::json;

namespace {

constexpr const char* kSupportedDecoders =
    "ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, or a Sequence of them";
constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

std::optional<unsigned> hex_digit(char c) {
  if (c >= '0' && c <= '9') return unsigned(c - '0');
  if (c >= 'a' && c <= 'f') return unsigned(c - 'a' + 10);
  if (c >= 'A' && c <= 'F') return unsigned(c - 'A' + 10);
  return std::nullopt;
}

// The byte of a "<0xXX>" token, read as tokenizers reads it (Rust's u8::from_str_radix on the
// two characters after "<0x", which also takes "+X").
std::optional<unsigned char> byte_token(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || !token.ends_with('>')) return std::nullopt;
  const auto hi = hex_digit(token[3]), lo = hex_digit(token[4]);
  if (!lo) return std::nullopt;
  if (hi) return static_cast<unsigned char>(*hi * 16 + *lo);
  if (token[3] == '+') return static_cast<unsigned char>(*lo);
  return std::nullopt;
}

std::vector<std::string> byte_fallback(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string bytes;
  auto flush = [&] {
    if (bytes.empty()) return;
    if (!first_invalid_utf8(bytes)) {
      out.push_back(bytes);
    } else {
      for (std::size_t i = 0; i < bytes.size(); ++i) out.emplace_back(kReplacementCharacter);
    }
    bytes.clear();
  };
  for (std::string& token : tokens) {
    if (const auto b = byte_token(token)) {
      bytes.push_back(static_cast<char>(*b));
    } else {
      flush();
      out.push_back(std::move(token));
    }
  }
  flush();
  return out;
}

// The character boundaries of s (valid UTF-8): offsets of each character's first byte, and
// s.size() last.
std::vector<std::size_t> char_starts(std::string_view s) {
  std::vector<std::size_t> starts;
  for (std::size_t i = 0; i < s.size();) {
    starts.push_back(i);
    const std::size_t n = utf8_sequence_length(s, i);
    i += n ? n : 1;
  }
  starts.push_back(s.size());
  return starts;
}

std::string strip(const std::string& token, const std::string& content, std::size_t start,
                  std::size_t stop) {
  const std::vector<std::size_t> at = char_starts(token);
  const std::size_t n = at.size() - 1;  // characters
  auto is_content = [&](std::size_t k) {
    return std::string_view(token).substr(at[k], at[k + 1] - at[k]) == content;
  };
  std::size_t first = 0, last = n;
  while (first < std::min(start, n) && is_content(first)) ++first;
  while (n - last < stop && last > first && is_content(last - 1)) --last;
  return token.substr(at[first], at[last] - at[first]);
}

// A number of characters (Strip's start and stop).
std::size_t count(const json& value, const JsonPlace& place) {
  if (!value.is_number_unsigned() && !(value.is_number_integer() && value.get<std::int64_t>() >= 0))
    place.malformed(fmt::format("expected a count of characters, got {}", short_json(value)));
  return value.get<std::size_t>();
}

}  // namespace

Decoder Decoder::from_json(const json& value, const JsonPlace& place) {
  Decoder d;
  d.add(value, place);
  return d;
}

void Decoder::add(const json& value, const JsonPlace& place) {
  if (!value.is_object() || !value.contains("type")) place.unsupported(value, kSupportedDecoders);
  const std::string& type = (place / "type").as_string(value["type"]);
  if (type == "Sequence") {
    place.each_in_sequence(value, "decoders",
                           [&](const json& v, const JsonPlace& at) { add(v, at); });
  } else if (type == "ByteLevel") {
    // The ByteLevel decoder ignores its options (they act on encoding offsets).
    place.check_keys(value, {"type", "add_prefix_space", "trim_offsets", "use_regex"});
    steps_.emplace_back(ByteLevel{});
  } else if (type == "Replace") {
    steps_.emplace_back(StringReplace::from_json(value, place));
  } else if (type == "ByteFallback") {
    place.check_keys(value, {"type"});
    steps_.emplace_back(ByteFallback{});
  } else if (type == "Fuse") {
    place.check_keys(value, {"type"});
    steps_.emplace_back(Fuse{});
  } else if (type == "Strip") {
    place.check_keys(value, {"type", "content", "start", "stop"});
    Strip s{(place / "content").as_string(place.at(value, "content")), 0, 0};
    if (s.content.empty() || utf8_sequence_length(s.content, 0) != s.content.size())
      (place / "content")
          .malformed(fmt::format("expected one character, got {}", short_json(value["content"])));
    s.start = count(place.at(value, "start"), place / "start");
    s.stop = count(place.at(value, "stop"), place / "stop");
    steps_.emplace_back(std::move(s));
  } else if (type == "Metaspace") {
    steps_.emplace_back(Metaspace::from_json(value, place));
  } else {
    place.unsupported(value, kSupportedDecoders);
  }
}

std::string Decoder::decode(std::vector<std::string> tokens) const {
  for (const Step& step : steps_) {
    if (std::holds_alternative<ByteLevel>(step)) {
      std::string bytes;
      for (const std::string& t : tokens) append_token_bytes(t, bytes);
      tokens = {from_utf8_lossy(bytes)};
    } else if (const auto* r = std::get_if<StringReplace>(&step)) {
      for (std::string& t : tokens) t = r->apply(t);
    } else if (std::holds_alternative<ByteFallback>(step)) {
      tokens = byte_fallback(std::move(tokens));
    } else if (std::holds_alternative<Fuse>(step)) {
      std::string all;
      for (const std::string& t : tokens) all += t;
      tokens = {std::move(all)};
    } else if (const auto* s = std::get_if<Strip>(&step)) {
      for (std::string& t : tokens) t = strip(t, s->content, s->start, s->stop);
    } else {
      const Metaspace& m = std::get<Metaspace>(step);
      for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = m.decode_token(tokens[i], i);
    }
  }
  std::string text;
  for (const std::string& t : tokens) text += t;
  return text;
}

}  // namespace fsdp::models
