#include "models/auto_model.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "core/input_error.h"
#include "models/gpt2.h"
#include "models/llama.h"

namespace fsdp::models {

ModelConfig parse_config(const nlohmann::json& config, const std::string& source) {
  if (!config.is_object())
    throw InputError(fmt::format("{}: expected a JSON object, got {}", source, config.type_name()));
  const auto it = config.find("model_type");
  if (it == config.end())
    throw InputError(
        fmt::format("{}: model_type is missing (supported: gpt2, llama, mistral)", source));
  if (*it == "gpt2") return GPT2Config::from_json(config, source);
  if (*it == "llama" || *it == "mistral") return LlamaConfig::from_json(config, source);
  throw InputError(
      fmt::format("{}: model_type {} is not supported (supported: gpt2, llama, "
                  "mistral)",
                  source, it->dump()));
}

ModelConfig load_config(const std::string& dir_or_file) {
  namespace fs = std::filesystem;
  const std::string path = fs::is_directory(dir_or_file)
                               ? (fs::path(dir_or_file) / "config.json").string()
                               : dir_or_file;
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot open the model config", path));
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(fmt::format("{}: not valid JSON (at byte {})", path, e.byte));
  }
  return parse_config(config, path);
}

std::shared_ptr<CausalLM> make_causal_lm(const ModelConfig& config, TensorOptions options) {
  if (const auto* gpt2 = std::get_if<GPT2Config>(&config))
    return std::make_shared<GPT2LMHeadModel>(*gpt2, options);
  return std::make_shared<LlamaForCausalLM>(std::get<LlamaConfig>(config), options);
}

}  // namespace fsdp::models
