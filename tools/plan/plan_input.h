// What fsdp-plan plans: an fsdp-model/1 file (model_file.h), or a Hugging Face model given by its
// config.json or the directory holding it, built on the meta device through models/ (no weights
// read, no PyTorch) with transformers' module tree.
#pragma once

#include <string>

#include "tools/plan/model_file.h"

namespace fsdp::plan {

struct PlanInput {
  LoadedModel model;
  // The policy used when --policy is absent: "transformer([<decoder block class>])" for a
  // Hugging Face config, one unit per decoder block as finetune wraps it; empty for a model
  // file (only the root unit).
  std::string default_policy;
};

// True for a directory and for a file named config.json: read as a Hugging Face config.
bool is_hf_config_input(const std::string& path);

// The model at `path`: a Hugging Face config (is_hf_config_input) built on meta in float32, else
// an fsdp-model/1 file. Errors are InputError lines naming the file (and the config field).
PlanInput load_plan_input(const std::string& path);

}  // namespace fsdp::plan
