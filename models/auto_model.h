// transformers' AutoConfig / AutoModelForCausalLM for the families here: the config class picked
// by config.json's model_type ("gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma3_text",
// "gemma2"), and the model built from it.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>

#include "core/tensor.h"
#include "models/causal_lm.h"
#include "models/gemma_config.h"
#include "models/gpt2_config.h"
#include "models/llama_config.h"

namespace fsdp::models {

using ModelConfig = std::variant<GPT2Config, LlamaConfig, GemmaConfig>;

// DIR/config.json (or the file itself) as JSON, and its path. InputError naming the file for an
// unreadable file or invalid JSON.
struct ConfigFile {
  std::string path;
  nlohmann::json json;
};
ConfigFile read_config_file(const std::string& dir_or_file);

// Reads DIR/config.json (or the file itself). InputError naming the file for an unreadable or
// invalid file, a missing or unsupported model_type, or any unsupported field.
ModelConfig load_config(const std::string& dir_or_file);
// The same over parsed JSON; `source` names it in errors.
ModelConfig parse_config(const nlohmann::json& config, const std::string& source);

// GPT2LMHeadModel, LlamaForCausalLM, Gemma3ForCausalLM or Gemma2ForCausalLM, initialised as
// transformers does (options.device meta: shapes only).
std::shared_ptr<CausalLM> make_causal_lm(const ModelConfig& config, TensorOptions options = {});

}  // namespace fsdp::models
