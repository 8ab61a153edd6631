// The identity of the job that wrote a sharded checkpoint: named fields in order ("heads" -> "4",
// "lr" -> "0.001", "param blocks.0.linear1.weight" -> "[32, 8]"), recorded in its index.json and
// compared when a job resumes from it, so that a checkpoint of another model, optimizer, batch or
// data set is refused by name instead of trained on. The fields are the caller's: the library
// stores and compares them, the training job decides what they are and which may change.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace fsdp {

using JobIdentity = std::vector<std::pair<std::string, std::string>>;

struct JobFieldChange {
  std::string field, saved, current;  // a value absent on one side reads "(none)"
};

// The first field of `current`, in its order, whose saved value differs; then the first saved
// field that `current` lacks. Fields in `may_change` are not compared. None when they agree.
std::optional<JobFieldChange> first_job_change(const JobIdentity& saved, const JobIdentity& current,
                                               const std::set<std::string>& may_change = {});

}  // namespace fsdp
