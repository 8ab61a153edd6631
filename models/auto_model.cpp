#include "models/auto_model.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "core/input_error.h"
#include "models/gemma.h"
#include "models/gpt2.h"
#include "models/llama.h"

namespace fsdp::models {

ModelConfig parse_config(const nlohmann::json& config, const std::string& source) {
  static const char* supported =
      "supported: gpt2, llama, mistral, qwen2, qwen3, gemma3_text, gemma2";
  if (!config.is_object())
    throw InputError(fmt::format("{}: expected a JSON object, got {}", source, config.type_name()));
  const auto it = config.find("model_type");
  if (it == config.end())
    throw InputError(fmt::format("{}: model_type is missing ({})", source, supported));
  if (*it == "gpt2") return GPT2Config::from_json(config, source);
  if (*it == "llama" || *it == "mistral" || *it == "qwen2" || *it == "qwen3")
    return LlamaConfig::from_json(config, source);
  if (*it == "gemma3_text" || *it == "gemma2") return GemmaConfig::from_json(config, source);
  if (*it == "gemma3")
    throw InputError(fmt::format(
        "{}: model_type \"gemma3\" (Gemma3ForConditionalGeneration, text and vision) is not "
        "supported; Gemma 3's text-only checkpoints (1B, model_type \"gemma3_text\") are",
        source));
  throw InputError(
      fmt::format("{}: model_type {} is not supported ({})", source, it->dump(), supported));
}

ConfigFile read_config_file(const std::string& dir_or_file) {
  namespace fs = std::filesystem;
  ConfigFile file;
  file.path = fs::is_directory(dir_or_file) ? (fs::path(dir_or_file) / "config.json").string()
                                            : dir_or_file;
  std::ifstream in(file.path);
  if (!in) throw InputError(fmt::format("{}: cannot open the model config", file.path));
  try {
    file.json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(fmt::format("{}: not valid JSON (at byte {})", file.path, e.byte));
  }
  return file;
}

ModelConfig load_config(const std::string& dir_or_file) {
  const ConfigFile file = read_config_file(dir_or_file);
  return parse_config(file.json, file.path);
}

std::shared_ptr<CausalLM> make_causal_lm(const ModelConfig& config, TensorOptions options) {
  if (const auto* gpt2 = std::get_if<GPT2Config>(&config))
    return std::make_shared<GPT2LMHeadModel>(*gpt2, options);
  if (const auto* gemma = std::get_if<GemmaConfig>(&config))
    return std::make_shared<GemmaForCausalLM>(*gemma, options);
  return std::make_shared<LlamaForCausalLM>(std::get<LlamaConfig>(config), options);
}

}  // namespace fsdp::models
