#include "models/pretrained.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "core/autograd.h"
#include "core/error.h"
#include "core/input_error.h"
#include "models/auto_model.h"
#include "models/config_fields.h"
#include "models/gemma.h"
#include "models/load_weights.h"
#include "models/rope.h"

namespace fsdp::models {

namespace {

namespace fs = std::filesystem;

// torch's names of the floating dtypes, as config.json's "dtype" spells them.
std::string torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::BFloat16:
      return "bfloat16";
    case DType::Float16:
      return "float16";
    case DType::Float64:
      return "float64";
    default:
      return "float32";
  }
}

// JSON as transformers writes it (indent 2, keys sorted: nlohmann's objects are ordered maps),
// atomically: a temporary file beside it, then a rename.
void write_json(const fs::path& path, const nlohmann::json& value) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << value.dump(2) << "\n";
    FSDP_CHECK(out.good(), RuntimeError, "save_pretrained: cannot write '{}'", tmp.string());
  }
  fs::rename(tmp, path);
}

// generation_config.json as save_pretrained derives it from the model's config.
nlohmann::json generation_config(const nlohmann::json& config) {
  nlohmann::json g = {{"_from_model_config", true},
                      {"output_attentions", false},
                      {"output_hidden_states", false},
                      {"use_cache", true}};
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (config.contains(key) && !config[key].is_null()) g[key] = config[key];
  if (config.contains("transformers_version"))
    g["transformers_version"] = config["transformers_version"];
  return g;
}

}  // namespace

std::shared_ptr<CausalLM> make_causal_lm_for_loading(const ModelConfig& config) {
  auto model = make_causal_lm(config, TensorOptions(DType::Float32, kMeta));
  model->to_empty(kCPU);
  for (const auto& [name, module] : model->named_modules()) init_computed_buffers(*module);
  return model;
}

nlohmann::json read_generation_config(const std::string& dir) {
  const fs::path path = fs::path(dir) / "generation_config.json";
  if (!fs::is_directory(dir) || !fs::exists(path)) return nlohmann::json::object();
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot open the generation config", path.string()));
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(fmt::format("{}: not valid JSON (at byte {})", path.string(), e.byte));
  }
  const ConfigFields fields(config, nlohmann::json::object(), path.string());
  fields.token_ids("eos_token_id");
  fields.optional_integer("pad_token_id");
  // The sampling defaults generate takes from it (generation_defaults), as transformers checks
  // them.
  const auto has = [&](const char* key) { return config.contains(key) && !config[key].is_null(); };
  if (has("temperature") && !(fields.number("temperature") > 0))
    fields.fail(fmt::format("temperature must be > 0, got {}", config["temperature"].dump()));
  if (has("top_k") && fields.optional_integer("top_k").value() < 0)
    fields.fail(fmt::format("top_k must be >= 0, got {}", config["top_k"].dump()));
  if (has("top_p") && !(fields.number("top_p") >= 0 && fields.number("top_p") <= 1))
    fields.fail(fmt::format("top_p must be in [0, 1], got {}", config["top_p"].dump()));
  if (has("max_new_tokens") && fields.optional_integer("max_new_tokens").value() < 0)
    fields.fail(
        fmt::format("max_new_tokens must be >= 0, got {}", config["max_new_tokens"].dump()));
  if (has("max_length") && fields.optional_integer("max_length").value() < 1)
    fields.fail(fmt::format("max_length must be >= 1, got {}", config["max_length"].dump()));
  if (has("repetition_penalty") && !(fields.number("repetition_penalty") > 0))
    fields.fail(
        fmt::format("repetition_penalty must be > 0, got {}", config["repetition_penalty"].dump()));
  return config;
}

ModelConfig untie_where_files_differ(ModelConfig config, const io::SafetensorsDir& files) {
  // Which tensors are tied is the module tree's: shapes only, no storage.
  const auto meta = make_causal_lm(config, TensorOptions(DType::Float32, kMeta));
  if (differing_tied_tensors(*meta, files))
    std::visit([](auto& c) { c.tie_word_embeddings = false; }, config);
  return config;
}

DType auto_dtype(const ConfigFile& config, const io::SafetensorsDir& files) {
  for (const char* key : {"dtype", "torch_dtype"}) {
    const auto it = config.json.find(key);
    if (it == config.json.end() || it->is_null()) continue;
    std::optional<DType> named;
    if (it->is_string()) {
      try {
        named = dtype_from_name(it->get<std::string>());
      } catch (const ValueError&) {
      }
    }
    if (!named || !is_floating(*named))
      throw InputError(
          fmt::format("{}: {} {} is not a floating dtype (float32, bfloat16, float16 or float64)",
                      config.path, key, it->dump()));
    return *named;
  }
  const std::vector<std::string> file_names = files.files();
  if (file_names.empty()) return DType::Float32;
  std::optional<std::string> first;
  for (const auto& name : files.names()) {
    const io::SafetensorsTensorInfo& info = files.info(name);
    if (info.file == file_names.front() && is_floating(info.dtype) && (!first || name < *first))
      first = name;
  }
  return first ? files.info(*first).dtype : DType::Float32;
}

std::shared_ptr<CausalLM> from_pretrained(const std::string& dir, std::optional<DType> dtype) {
  FSDP_CHECK(!dtype || is_floating(*dtype), ValueError,
             "from_pretrained: dtype {} is not a floating dtype (float32, bfloat16, float16, "
             "float64)",
             dtype_name(*dtype));
  // Drawing transformers' random initialisation first was most of a cold load's time.
  const ConfigFile config_file = read_config_file(dir);
  const ModelConfig config = parse_config(config_file.json, config_file.path);
  const io::SafetensorsDir files = open_pretrained_weights(dir);
  const DType want = dtype ? *dtype : auto_dtype(config_file, files);
  auto model = make_causal_lm_for_loading(untie_where_files_differ(config, files));
  load_pretrained_weights(*model, files);
  model->generation_config = read_generation_config(dir);
  if (want != DType::Float32) model->to(want);
  return model;
}

void save_pretrained(const std::string& dir, const CausalLM& model,
                     const std::vector<std::pair<std::string, Tensor>>& state,
                     std::int64_t max_shard_bytes) {
  DType dtype = DType::Float32;
  for (const auto& [name, t] : state)
    if (is_floating(t.dtype())) {
      dtype = t.dtype();
      break;
    }
  const nlohmann::json config = model.config_json(torch_dtype_name(dtype));
  // A tied head is the embedding's tensor: transformers writes it once, under the embedding's name.
  const bool tied = config.value("tie_word_embeddings", false);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : state)
    if (!(tied && name == "lm_head.weight")) tensors.emplace_back(name, t);
  fs::create_directories(dir);
  io::save_safetensors_dir(dir, tensors, max_shard_bytes, {{"format", "pt"}});
  write_json(fs::path(dir) / "config.json", config);
  write_json(fs::path(dir) / "generation_config.json",
             model.generation_config.empty() ? generation_config(config) : model.generation_config);
}

void init_computed_buffers(nn::Module& module) {
  if (dynamic_cast<LlamaRotaryEmbedding*>(&module) || dynamic_cast<GemmaRotaryEmbedding*>(&module))
    module.reset_parameters();
}

std::string decoder_block_class(const nn::Module& model) {
  for (const auto& [name, m] : const_cast<nn::Module&>(model).named_modules())
    if (m->isinstance("GradientCheckpointingLayer")) return m->type_name();
  throw ValueError(
      fmt::format("{} has no decoder blocks (GradientCheckpointingLayer)", model.type_name()));
}

}  // namespace fsdp::models
