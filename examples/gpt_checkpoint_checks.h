// What train_gpt checks about its checkpoints before the first step, so that a mistake is one
// clear error at the start and not a silent change or a failure after training: the job's
// identity against the checkpoint it resumes (fsdp/checkpoint_job.h), the model config against
// the full checkpoint it loads, that no stray directory holds a name it will save under, and
// that --save can be written.
#pragma once

#include <map>
#include <set>
#include <string>

#include "examples/gpt.h"
#include "examples/gpt_train.h"
#include "fsdp/checkpoint_job.h"

namespace fsdp::examples {

// The --allow-change names and the identity fields each lets a resume change.
inline constexpr const char* kAllowChangeNames[] = {"lr", "world-size"};
std::set<std::string> changeable_fields(const std::set<std::string>& allow_changes);

// The model's config as a job identity: layers, d_model, heads, seq, vocab.
JobIdentity gpt_model_identity(const GPTConfig& model);
// The metadata of train_gpt's full checkpoints (--save): the format, the program, and the model's
// config as "gpt.<field>" entries, which --load checks.
std::map<std::string, std::string> gpt_full_checkpoint_metadata(const GPTConfig& model);
// ValueError naming --load's path, the first config field that differs and both values, when
// the checkpoint's metadata records a config (one written by train_gpt --save) and it differs.
void check_load_matches(const std::string& path, const std::map<std::string, std::string>& metadata,
                        const GPTConfig& model);

// The job as its checkpoints record it: the model's config and parameters (FQN -> shape,
// job_model.identity), the
// optimizer and its learning rate, the global batch, world size and per-rank batch, and the
// training data's size and XXH3-64.
JobIdentity gpt_job_identity(const GPTTrainConfig& cfg, int world, const JobModel& job_model,
                             nn::Module& model, const std::string& data_xxh3);

// ValueError naming the checkpoint, the first field that differs, its saved and current values
// and what to do, unless the field is one `allow_changes` (--allow-change) lets change.
void check_resume_matches(const std::string& checkpoint, const JobIdentity& current,
                          const std::set<std::string>& allow_changes);

// ValueError naming an entry of --checkpoint-dir that is not a checkpoint but has the name of one
// this job will save (steps first_step + 1 to cfg.steps): a save never replaces what it did not
// write, so it is refused before the first step rather than at that save.
void check_checkpoint_names_free(const GPTTrainConfig& cfg, int first_step);

// ValueError naming --save's path when the full checkpoint could not be written there.
void check_save_path_writable(const std::string& path);

}  // namespace fsdp::examples
