// Typed reads of a config.json's fields with transformers' defaults; every error is one
// InputError line naming the file, the field and the value found.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fsdp::models {

// The fields of one config: `defaults` overlaid with the file's object (aliases renamed to their
// canonical names first). Reads check types; `source` names the file in errors.
class ConfigFields {
 public:
  ConfigFields(const nlohmann::json& file, const nlohmann::json& defaults, std::string source,
               const std::vector<std::pair<std::string, std::string>>& aliases = {});

  std::int64_t positive(const std::string& key) const;                         // an integer > 0
  std::optional<std::int64_t> optional_integer(const std::string& key) const;  // null: nullopt
  double number(const std::string& key) const;
  bool boolean(const std::string& key) const;
  std::string string(const std::string& key) const;
  std::string activation(const std::string& key) const;  // a string naming a supported one
  bool is_null(const std::string& key) const;
  // Token ids: an integer, a list of integers, or null (none); eos_token_id's forms.
  std::vector<std::int64_t> token_ids(const std::string& key) const;

  // InputError "<source>: <field> <value> is not supported (<why>)".
  [[noreturn]] void unsupported(const std::string& field, const nlohmann::json& value,
                                const std::string& why) const;
  // InputError "<source>: <what>".
  [[noreturn]] void fail(const std::string& what) const;

  nlohmann::json& json() { return fields_; }
  const nlohmann::json& json() const { return fields_; }
  const std::string& source() const { return source_; }

 private:
  const nlohmann::json& at(const std::string& key) const;
  [[noreturn]] void wrong_type(const std::string& key, const char* expected) const;
  nlohmann::json fields_;
  std::string source_;
};

// The fields every save_pretrained config.json carries beside the class's own: architectures,
// model_type, dtype and transformers_version, all keys sorted (nlohmann's object order).
nlohmann::json saved_config(nlohmann::json fields, const std::string& architecture,
                            const std::string& model_type, const std::string& dtype);

}  // namespace fsdp::models
