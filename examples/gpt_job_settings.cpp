#include "examples/gpt_job_settings.h"

#include <fmt/format.h>

#include "core/io/checksum.h"

namespace fsdp::examples {

namespace {

std::string path_or_none(const std::string& path) {
  return path.empty() ? "none" : path;
}

// Files are compared by content: two hosts may hold the same corpus under other paths. `xxh3`:
// the bytes' XXH3-64 when the caller has it already, else computed here.
std::string data_digest(const TokenData& data, const std::string& xxh3 = "") {
  if (!data) return "none";
  const std::string_view raw = data.raw();
  return fmt::format("{} {}, xxh3 {}", data.size(), data.unit(),
                     xxh3.empty() ? io::xxh3_hex(raw.data(), raw.size()) : xxh3);
}

// "FULL_SHARD" from "ShardingStrategy.FULL_SHARD": the command line's spelling.
template <typename Enum>
std::string choice_or_none(const std::optional<Enum>& v) {
  if (!v) return "none";
  const std::string s = policies::to_string(*v);
  return s.substr(s.find('.') + 1);
}

}  // namespace

std::vector<comm::NamedSetting> gpt_job_settings(const GPTTrainConfig& cfg,
                                                 const JobModel& job_model, nn::Module& model,
                                                 const std::string& data_xxh3) {
  std::vector<comm::NamedSetting> settings = job_model.settings(model);
  const std::vector<comm::NamedSetting> job = {
      {"--batch", fmt::format("{}", cfg.batch)},
      {"--steps", fmt::format("{}", cfg.steps)},
      {"--lr", fmt::format("{}", cfg.lr)},
      {"--optimizer", cfg.optimizer},
      {"--seed", fmt::format("{}", cfg.seed)},
      {"--data", data_digest(cfg.data, data_xxh3)},
      {"--sharding", choice_or_none(cfg.sharding)},
      {"--policy", cfg.policy.empty() ? "none" : cfg.policy},
      {"--use-orig-params", cfg.use_orig_params ? "on" : "off"},
      {"--forward-prefetch", cfg.forward_prefetch ? "on" : "off"},
      {"--cpu-offload", cfg.cpu_offload ? "on" : "off"},
      {"--backward-prefetch", choice_or_none(cfg.backward_prefetch)},
      {"--node-size", fmt::format("{}", cfg.node_size)},
      {"--clip-grad-norm", fmt::format("{}", cfg.clip_grad_norm)},
      {"--checkpoint-activations", cfg.checkpoint_activations},
      {"--mixed-precision",
       cfg.mixed_precision ? std::string(dtype_name(*cfg.mixed_precision)) : "none"},
      {"--allow-nonfinite", cfg.allow_nonfinite ? "on" : "off"},
      {"--eval-data", data_digest(cfg.eval_data)},
      {"--eval-batches", fmt::format("{}", cfg.eval_batches)},
      {"--load", path_or_none(cfg.load_path)},
      {"--save", path_or_none(cfg.save_path)},
      {"--max-shard-size", fmt::format("{}", cfg.max_shard_bytes)},
      {"--checkpoint-dir", path_or_none(cfg.checkpoint_dir)},
      {"--save-every", fmt::format("{}", cfg.save_every)},
      {"--keep", fmt::format("{}", cfg.keep)},
      {"--resume", path_or_none(cfg.resume_dir)},
      {"--weight-decay", cfg.weight_decay ? fmt::format("{}", *cfg.weight_decay) : "default"},
  };
  settings.insert(settings.end(), job.begin(), job.end());
  return settings;
}

}  // namespace fsdp::examples
