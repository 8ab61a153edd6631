#include "tools/plan/plan_input.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/error.h"
#include "core/input_error.h"
#include "models/auto_model.h"
#include "models/pretrained.h"

namespace fsdp::plan {

namespace fs = std::filesystem;

bool is_hf_config_input(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) || fs::path(path).filename() == "config.json";
}

PlanInput load_plan_input(const std::string& path) {
  PlanInput in;
  if (!is_hf_config_input(path)) {
    in.model = load_model(path);
    return in;
  }
  std::error_code ec;
  std::string config_path = path;
  if (fs::is_directory(path, ec)) {
    config_path = (fs::path(path) / "config.json").string();
    if (!fs::exists(config_path, ec))
      throw InputError(fmt::format(
          "{}: a directory without config.json (fsdp-plan reads an fsdp-model/1 file, a Hugging "
          "Face config.json or the directory holding it)",
          path));
  }
  const models::ModelConfig config = models::load_config(config_path);
  try {
    // Float32 whatever config.json's dtype says: FSDP keeps full-precision parameters (finetune
    // trains them so); --mixed-precision plans bfloat16 compute.
    in.model.root = models::make_causal_lm(config, TensorOptions(DType::Float32, kMeta));
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    // Sizes the config accepts one by one whose product does not fit (vocab_size * hidden_size
    // past 2^63 elements): the file is named.
    throw InputError(fmt::format("{}: building the model: {}", config_path, e.what()));
  }
  in.default_policy = "transformer([" + models::decoder_block_class(*in.model.root) + "])";
  return in;
}

}  // namespace fsdp::plan
