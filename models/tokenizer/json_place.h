// A field of a tokenizer.json (the file and the field's path, "pre_tokenizer.pretokenizers[0]"),
// and the checks every part of the loader makes with it, so that each error is one line naming
// the file, the field and its value: "FILE: normalizer is {"type":"NFC"}: not supported (...)".
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace fsdp::models {

class JsonPlace {
 public:
  explicit JsonPlace(std::string file, std::string path = "");
  JsonPlace operator/(std::string_view key) const;  // the field `key` of this object
  JsonPlace operator[](std::size_t index) const;    // the element `index` of this array
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }

  // "FILE: PATH is VALUE: not supported (SUPPORTED)".
  [[noreturn]] void unsupported(const nlohmann::json& value, std::string_view supported) const;
  // "FILE: PATH: WHAT".
  [[noreturn]] void malformed(std::string_view what) const;

  // The field `key` of the object here (an error if this is no object or it is missing).
  const nlohmann::json& at(const nlohmann::json& object, std::string_view key) const;
  // Refuses any field of the object here that is not in `known`.
  void check_keys(const nlohmann::json& object,
                  std::initializer_list<std::string_view> known) const;
  // Calls add(element, its place) on each element of a Sequence object here ({"type":
  // "Sequence", key: [...]}, as the normalizer, pre-tokenizer, post-processor and decoder have).
  void each_in_sequence(
      const nlohmann::json& object, std::string_view key,
      const std::function<void(const nlohmann::json&, const JsonPlace&)>& add) const;
  // The value here as a bool / string / token id (0 to 2^31-1), or an error naming its type.
  bool as_bool(const nlohmann::json& value) const;
  const std::string& as_string(const nlohmann::json& value) const;
  std::uint32_t as_id(const nlohmann::json& value) const;

 private:
  std::string file_, path_;
};

// Whether `value` is a token id: an integer from 0 to 2^31-1 (below 2^31: llm.c's files count
// tokens in int32, and vocab_size() is one more than an id).
bool is_id(const nlohmann::json& value);

// A JSON value in one short line for a message (cut after 60 characters).
std::string short_json(const nlohmann::json& value);

}  // namespace fsdp::models
