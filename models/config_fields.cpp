#include "models/config_fields.h"

#include <fmt/format.h>

#include "core/input_error.h"
#include "models/activation.h"

namespace fsdp::models {

ConfigFields::ConfigFields(const nlohmann::json& file, const nlohmann::json& defaults,
                           std::string source,
                           const std::vector<std::pair<std::string, std::string>>& aliases)
    : fields_(defaults), source_(std::move(source)) {
  if (!file.is_object()) fail(fmt::format("expected a JSON object, got {}", file.type_name()));
  for (const auto& [key, value] : file.items()) {
    std::string name = key;
    for (const auto& [alias, canonical] : aliases)  // transformers' attribute_map
      if (key == alias) name = canonical;
    fields_[name] = value;
  }
}

const nlohmann::json& ConfigFields::at(const std::string& key) const {
  static const nlohmann::json null;
  const auto it = fields_.find(key);
  return it == fields_.end() ? null : *it;
}

void ConfigFields::wrong_type(const std::string& key, const char* expected) const {
  fail(fmt::format("{} must be {}, got {}", key, expected, at(key).dump()));
}

std::int64_t ConfigFields::positive(const std::string& key) const {
  const auto& v = at(key);
  if (!v.is_number_integer() || v.get<std::int64_t>() <= 0) wrong_type(key, "a positive integer");
  return v.get<std::int64_t>();
}

std::optional<std::int64_t> ConfigFields::optional_integer(const std::string& key) const {
  const auto& v = at(key);
  if (v.is_null()) return std::nullopt;
  if (!v.is_number_integer()) wrong_type(key, "an integer or null");
  return v.get<std::int64_t>();
}

double ConfigFields::number(const std::string& key) const {
  const auto& v = at(key);
  if (!v.is_number()) wrong_type(key, "a number");
  return v.get<double>();
}

bool ConfigFields::boolean(const std::string& key) const {
  const auto& v = at(key);
  if (!v.is_boolean()) wrong_type(key, "true or false");
  return v.get<bool>();
}

std::string ConfigFields::string(const std::string& key) const {
  const auto& v = at(key);
  if (!v.is_string()) wrong_type(key, "a string");
  return v.get<std::string>();
}

std::string ConfigFields::activation(const std::string& key) const {
  const std::string name = string(key);
  if (!is_supported_activation(name)) {
    std::string names;
    for (const auto& n : supported_activations()) names += (names.empty() ? "" : ", ") + n;
    unsupported(key, name, "supported: " + names);
  }
  return name;
}

std::vector<std::int64_t> ConfigFields::token_ids(const std::string& key) const {
  const auto& v = at(key);
  std::vector<std::int64_t> ids;
  if (v.is_number_integer()) ids.push_back(v.get<std::int64_t>());
  for (const auto& id : v.is_array() ? v : nlohmann::json::array()) {
    if (!id.is_number_integer()) wrong_type(key, "an integer, a list of integers or null");
    ids.push_back(id.get<std::int64_t>());
  }
  if (!v.is_null() && !v.is_number_integer() && !v.is_array())
    wrong_type(key, "an integer, a list of integers or null");
  return ids;
}

bool ConfigFields::is_null(const std::string& key) const {
  return at(key).is_null();
}

void ConfigFields::unsupported(const std::string& field, const nlohmann::json& value,
                               const std::string& why) const {
  fail(fmt::format("{} {} is not supported ({})", field, value.dump(), why));
}

void ConfigFields::fail(const std::string& what) const {
  throw InputError(fmt::format("{}: {}", source_, what));
}

nlohmann::json saved_config(nlohmann::json fields, const std::string& architecture,
                            const std::string& model_type, const std::string& dtype) {
  fields.erase("torch_dtype");  // v5 writes dtype (and still reads torch_dtype)
  fields["architectures"] = nlohmann::json::array({architecture});
  fields["model_type"] = model_type;
  fields["dtype"] = dtype;
  if (!fields.contains("transformers_version")) fields["transformers_version"] = "5.24.0";
  return fields;
}

}  // namespace fsdp::models
