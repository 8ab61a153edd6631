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
std::string bytes_digest(const std::shared_ptr<const std::string>& bytes,
                         const std::string& xxh3 = "") {
  if (bytes == nullptr) return "none";
  return fmt::format("{} bytes, xxh3 {}", bytes->size(),
                     xxh3.empty() ? io::xxh3_hex(bytes->data(), bytes->size()) : xxh3);
}

// "FULL_SHARD" from "ShardingStrategy.FULL_SHARD": the command line's spelling.
template <typename Enum>
std::string choice_or_none(const std::optional<Enum>& v) {
  if (!v) return "none";
  const std::string s = policies::to_string(*v);
  return s.substr(s.find('.') + 1);
}

// The configuration (heads change no shape) and every module and parameter by name, class,
// shape and dtype: equal only for the same model built by the same code.
std::string model_fingerprint(GPT& model) {
  const GPTConfig& c = model.config;
  std::string text =
      fmt::format("L{} D{} H{} T{} V{}", c.layers, c.d_model, c.heads, c.seq, c.vocab);
  for (const auto& [name, m] : model.named_modules())
    text += fmt::format("|{}:{}", name, m->type_name());
  for (const auto& [name, p] : model.named_parameters()) {
    text += fmt::format("|{}:{}:", name, dtype_name(p.dtype()));
    for (std::int64_t size : p.sizes()) text += fmt::format("{},", size);
  }
  return fmt::format("GPT L{} D{} H{} T{} V{}, {} parameters, fingerprint {:016x}", c.layers,
                     c.d_model, c.heads, c.seq, c.vocab, model.num_parameters(),
                     comm::hash64(text));
}

}  // namespace

std::vector<comm::NamedSetting> gpt_job_settings(const GPTTrainConfig& cfg, GPT& model,
                                                 const std::string& data_xxh3) {
  const GPTConfig& m = cfg.model;
  return {
      {"--layers", fmt::format("{}", m.layers)},
      {"--d-model", fmt::format("{}", m.d_model)},
      {"--heads", fmt::format("{}", m.heads)},
      {"--seq", fmt::format("{}", m.seq)},
      {"--batch", fmt::format("{}", cfg.batch)},
      {"--steps", fmt::format("{}", cfg.steps)},
      {"--lr", fmt::format("{}", cfg.lr)},
      {"--optimizer", cfg.optimizer},
      {"--seed", fmt::format("{}", cfg.seed)},
      {"--data", bytes_digest(cfg.data, data_xxh3)},
      {"--sharding", choice_or_none(cfg.sharding)},
      {"--policy", cfg.policy.empty() ? "none" : cfg.policy},
      {"--use-orig-params", cfg.use_orig_params ? "on" : "off"},
      {"--forward-prefetch", cfg.forward_prefetch ? "on" : "off"},
      {"--backward-prefetch", choice_or_none(cfg.backward_prefetch)},
      {"--node-size", fmt::format("{}", cfg.node_size)},
      {"--clip-grad-norm", fmt::format("{}", cfg.clip_grad_norm)},
      {"--checkpoint-activations", cfg.checkpoint_activations},
      {"--mixed-precision",
       cfg.mixed_precision ? std::string(dtype_name(*cfg.mixed_precision)) : "none"},
      {"--allow-nonfinite", cfg.allow_nonfinite ? "on" : "off"},
      {"--eval-data", bytes_digest(cfg.eval_data)},
      {"--eval-batches", fmt::format("{}", cfg.eval_batches)},
      {"--load", path_or_none(cfg.load_path)},
      {"--save", path_or_none(cfg.save_path)},
      {"--max-shard-size", fmt::format("{}", cfg.max_shard_bytes)},
      {"--checkpoint-dir", path_or_none(cfg.checkpoint_dir)},
      {"--save-every", fmt::format("{}", cfg.save_every)},
      {"--keep", fmt::format("{}", cfg.keep)},
      {"--resume", path_or_none(cfg.resume_dir)},
      {"the model", model_fingerprint(model)},
  };
}

}  // namespace fsdp::examples
