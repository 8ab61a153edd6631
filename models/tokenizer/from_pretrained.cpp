// Tokenizer::from_pretrained: a save_pretrained directory's tokenizer as transformers 5's
// AutoTokenizer builds it (tokenizer.json, and the class that tokenizer_config.json names).
#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/input_error.h"
#include "models/tokenizer/json_file.h"
#include "models/tokenizer/json_place.h"
#include "models/tokenizer/llama_tokenizer_class.h"
#include "models/tokenizer/tokenizer.h"

namespace fsdp::models {

Tokenizer Tokenizer::from_pretrained(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return from_file(path);
  const std::string file = (fs::path(path) / "tokenizer.json").string();
  if (!fs::exists(file, ec))
    throw InputError(fmt::format("{}: no tokenizer.json in this directory", path));
  const std::string config_file = (fs::path(path) / "tokenizer_config.json").string();
  if (!fs::exists(config_file, ec)) return from_file(file);
  const nlohmann::json config = read_json_file(config_file);
  if (!names_llama_tokenizer_class(config)) return from_file(file);
  // Errors in the rebuilt pipeline name both files: the fields come from either.
  return from_json(as_llama_tokenizer_class(read_json_file(file), config, JsonPlace(config_file)),
                   fmt::format("{} (as transformers' LlamaTokenizer with {})", file, config_file));
}

}  // namespace fsdp::models
