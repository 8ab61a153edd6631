// What every rank of a train_gpt job must agree on (issue 22, part 3): the arguments that change
// what is computed, by their command-line names, and the model's fingerprint. Ranks started with
// another --lr, --heads or --data would otherwise train on, each its own job.
#pragma once

#include <vector>

#include "comm/agreement.h"
#include "examples/gpt_train.h"
#include "examples/job_model.h"

namespace fsdp::examples {

// The settings of `cfg` and `model` (before wrapping) that must match, as the user would write
// them ("--lr", "0.001"); the data files by size and hash, the model's (job_model.settings: its
// configuration and every parameter's name, shape and dtype) first. `data_xxh3`: the training
// data's XXH3-64 (core/io/checksum.h), computed once by the caller.
std::vector<comm::NamedSetting> gpt_job_settings(const GPTTrainConfig& cfg,
                                                 const JobModel& job_model, nn::Module& model,
                                                 const std::string& data_xxh3);

}  // namespace fsdp::examples
