#include "tools/plan/plan_input.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/input_error.h"
#include "models/auto_model.h"
#include "models/pretrained.h"

namespace fsdp::plan {

bool is_hf_config_input(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  return fs::is_directory(path, ec) || fs::path(path).filename() == "config.json";
}

PlanInput load_plan_input(const std::string& path) {
  PlanInput in;
  if (!is_hf_config_input(path)) {
    in.model = load_model(path);
    return in;
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec) && !fs::exists(fs::path(path) / "config.json", ec))
    throw InputError(fmt::format(
        "{}: a directory without config.json (fsdp-plan reads an fsdp-model/1 file, a Hugging "
        "Face config.json or the directory holding it)",
        path));
  // Float32 whatever config.json's dtype says: FSDP keeps full-precision parameters (finetune
  // trains them so); --mixed-precision plans bfloat16 compute.
  in.model.root =
      models::make_causal_lm(models::load_config(path), TensorOptions(DType::Float32, kMeta));
  in.default_policy = "transformer([" + models::decoder_block_class(*in.model.root) + "])";
  return in;
}

}  // namespace fsdp::plan
