#include "examples/gpt_checkpoint_checks.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/io/checksum.h"
#include "fsdp/checkpoint.h"

namespace fsdp::examples {

namespace fs = std::filesystem;

std::set<std::string> changeable_fields(const std::set<std::string>& allow_changes) {
  std::set<std::string> fields;
  for (const auto& name : allow_changes) {
    if (name == "lr") fields.insert("lr");
    // The data order follows the global batch alone (gpt_data.h): ranks x batch may be regrouped.
    if (name == "world-size") fields.insert({"world_size", "batch"});
  }
  return fields;
}

JobIdentity gpt_model_identity(const GPTConfig& m) {
  return {{"layers", std::to_string(m.layers)},
          {"d_model", std::to_string(m.d_model)},
          {"heads", std::to_string(m.heads)},
          {"seq", std::to_string(m.seq)},
          {"vocab", std::to_string(m.vocab)}};
}

namespace {
constexpr std::string_view kConfigPrefix = "gpt.";
}

std::map<std::string, std::string> gpt_full_checkpoint_metadata(const GPTConfig& model) {
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"model", "fsdp-cpp train_gpt"}};
  for (const auto& [field, value] : gpt_model_identity(model))
    metadata[std::string(kConfigPrefix) + field] = value;
  return metadata;
}

void check_load_matches(const std::string& path, const std::map<std::string, std::string>& metadata,
                        const GPTConfig& model) {
  JobIdentity saved;
  for (const auto& [key, value] : metadata)
    if (key.starts_with(kConfigPrefix)) saved.emplace_back(key.substr(kConfigPrefix.size()), value);
  if (saved.empty()) return;  // not train_gpt's (PyTorch's, say): the shapes are checked on load
  const auto change = first_job_change(saved, gpt_model_identity(model));
  if (!change) return;
  throw ValueError(fmt::format(
      "--load: {} does not match this job: {} saved {}, now {} (a checkpoint of another model)",
      path, change->field, change->saved, change->current));
}

JobIdentity gpt_job_identity(const GPTTrainConfig& cfg, int world, const JobModel& job_model,
                             nn::Module& model, const std::string& data_xxh3) {
  JobIdentity job = job_model.identity(model);
  job.emplace_back("optimizer", cfg.optimizer);
  job.emplace_back("lr", fmt::format("{}", cfg.lr));
  job.emplace_back("global_batch", std::to_string(cfg.batch * world));
  job.emplace_back("world_size", std::to_string(world));
  job.emplace_back("batch", std::to_string(cfg.batch));
  if (cfg.data) {
    // A text's size keeps its old name: checkpoints of earlier jobs resume.
    job.emplace_back(cfg.data.unit() == std::string_view("bytes") ? "data_bytes" : "data_tokens",
                     std::to_string(cfg.data.size()));
    job.emplace_back("data_xxh3", data_xxh3);
  }
  return job;
}

namespace {

// What a differing field means and what to do about it.
std::string resume_hint(const JobFieldChange& c) {
  const std::string& f = c.field;
  if (f == "lr")
    return fmt::format(
        "pass --allow-change lr to go on with --lr {}, or give --lr {} to keep the saved one",
        c.current, c.saved);
  if (f == "world_size")
    return "pass --allow-change world-size to resume at another world size with the same global "
           "batch";
  if (f == "global_batch")
    return fmt::format("--batch x world size; the data order depends on it: keep it at {}",
                       c.saved);
  if (f == "batch") return "sequences per rank";
  if (f == "optimizer")
    return fmt::format("its state is {}'s: give --optimizer {}", c.saved, c.saved);
  if (f.starts_with("data_")) return "the checkpoint was trained on other --data";
  return "a checkpoint of another model";
}

}  // namespace

void check_resume_matches(const std::string& checkpoint, const JobIdentity& current,
                          const std::set<std::string>& allow_changes) {
  const JobIdentity saved = read_checkpoint_job(checkpoint);
  const auto change = first_job_change(saved, current, changeable_fields(allow_changes));
  if (!change) return;
  throw ValueError(fmt::format("--resume: {} does not match this job: {} saved {}, now {} ({})",
                               checkpoint, change->field, change->saved, change->current,
                               resume_hint(*change)));
}

void check_checkpoint_names_free(const GPTTrainConfig& cfg, int first_step) {
  if (cfg.checkpoint_dir.empty()) return;
  std::map<std::string, int> saved;  // name -> step, of each save this job makes
  for (int step = first_step + 1; step <= cfg.steps; ++step)
    if ((cfg.save_every > 0 && step % cfg.save_every == 0) || step == cfg.steps)
      saved[checkpoint_name(step)] = step;
  for (const auto& [path, why] : scan_checkpoint_dir(cfg.checkpoint_dir).ignored) {
    auto it = saved.find(fs::path(path).filename().string());
    FSDP_CHECK(it == saved.end(), ValueError,
               "--checkpoint-dir: {} is in the way of this job's checkpoint of step {} ({}); move "
               "it away",
               path, it->second, why);
  }
}

void check_save_path_writable(const std::string& path) {
  std::error_code ec;
  fs::path probe;
  if (path.ends_with(".safetensors")) {
    FSDP_CHECK(!fs::is_directory(path, ec), ValueError, "--save '{}' is a directory", path);
    probe = path + ".tmp";  // the writer's temporary file (core/io/safetensors.h)
  } else {
    FSDP_CHECK(!fs::exists(path, ec) || fs::is_directory(path, ec), ValueError,
               "--save '{}' exists and is not a directory (a full checkpoint is FILE.safetensors "
               "or a directory in Hugging Face's layout)",
               path);
    fs::create_directories(path, ec);
    FSDP_CHECK(!ec, ValueError, "--save '{}': cannot create the directory: {}", path, ec.message());
    probe = fs::path(path) / fmt::format(".write-test-{}", ::getpid());
  }
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EEXIST) return;  // a leftover temporary file: it will be replaced
  FSDP_CHECK(fd >= 0, ValueError, "--save '{}': cannot write there: {}", path,
             std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace fsdp::examples
