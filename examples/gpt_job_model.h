// train_gpt's model as a JobModel (job_model.h): the byte-level GPT of gpt.h built from its
// config, initialised by gpt_init or loaded from --load, saved by --save as a safetensors file
// or a directory in Hugging Face's layout (with the config as metadata, which --load checks).
#pragma once

#include <memory>

#include "examples/gpt.h"
#include "examples/job_model.h"

namespace fsdp::examples {

std::shared_ptr<const JobModel> gpt_job_model(const GPTConfig& config);

}  // namespace fsdp::examples
