// A JSON file read whole and parsed: tokenizer.json and tokenizer_config.json.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace fsdp::models {

// The parsed content of `path`; a missing, unreadable or invalid file is an InputError naming it.
nlohmann::json read_json_file(const std::string& path);

}  // namespace fsdp::models
