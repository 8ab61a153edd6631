#include "models/tokenizer/json_place.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/input_error.h"

namespace fsdp::models {

using nlohmann::json;

JsonPlace::JsonPlace(std::string file, std::string path)
    : file_(std::move(file)), path_(std::move(path)) {}

JsonPlace JsonPlace::operator/(std::string_view key) const {
  return JsonPlace(file_, path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key));
}

JsonPlace JsonPlace::operator[](std::size_t index) const {
  return JsonPlace(file_, fmt::format("{}[{}]", path_, index));
}

void JsonPlace::unsupported(const json& value, std::string_view supported) const {
  throw InputError(
      fmt::format("{}: {} is {}: not supported ({})", file_, path_, short_json(value), supported));
}

void JsonPlace::malformed(std::string_view what) const {
  throw InputError(fmt::format("{}: {}: {}", file_, path_.empty() ? "top level" : path_, what));
}

const json& JsonPlace::at(const json& object, std::string_view key) const {
  if (!object.is_object()) malformed(fmt::format("expected an object, got {}", short_json(object)));
  auto it = object.find(key);
  if (it == object.end()) (*this / key).malformed("missing");
  return *it;
}

void JsonPlace::check_keys(const json& object,
                           std::initializer_list<std::string_view> known) const {
  if (!object.is_object()) malformed(fmt::format("expected an object, got {}", short_json(object)));
  for (auto it = object.begin(); it != object.end(); ++it)
    if (std::find(known.begin(), known.end(), it.key()) == known.end())
      (*this / it.key()).unsupported(it.value(), "a field this tokenizer does not know");
}

void JsonPlace::each_in_sequence(
    const json& object, std::string_view key,
    const std::function<void(const json&, const JsonPlace&)>& add) const {
  check_keys(object, {"type", key});
  const json& list = at(object, key);
  if (!list.is_array()) (*this / key).malformed("expected an array");
  for (std::size_t i = 0; i < list.size(); ++i) add(list[i], (*this / key)[i]);
}

bool JsonPlace::as_bool(const json& value) const {
  if (!value.is_boolean())
    malformed(fmt::format("expected true or false, got {}", short_json(value)));
  return value.get<bool>();
}

const std::string& JsonPlace::as_string(const json& value) const {
  if (!value.is_string()) malformed(fmt::format("expected a string, got {}", short_json(value)));
  return value.get_ref<const std::string&>();
}

bool is_id(const json& value) {
  return value.is_number_unsigned() ? value.get<std::uint64_t>() < 0x80000000u
                                    : value.is_number_integer() && value.get<std::int64_t>() >= 0 &&
                                          value.get<std::int64_t>() < 0x80000000;
}

std::uint32_t JsonPlace::as_id(const json& value) const {
  if (!is_id(value))
    malformed(fmt::format("expected a token id (an integer from 0 to 2^31-1), got {}",
                          short_json(value)));
  return value.get<std::uint32_t>();
}

std::string short_json(const json& value) {
  std::string s = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) {
    std::size_t cut = 57;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // whole chars
    s = s.substr(0, cut) + "...";
  }
  return s;
}

}  // namespace fsdp::models
