#include "examples/gpt_job_model.h"

#include <fmt/format.h>

#include <filesystem>

#include "comm/agreement.h"
#include "core/io/safetensors.h"
#include "examples/gpt_checkpoint_checks.h"
#include "examples/gpt_train.h"
#include "fsdp/checkpoint_full.h"
#include "fsdp/full_state_dict.h"
#include "fsdp/fully_sharded_data_parallel.h"

namespace fsdp::examples {

namespace {

// Full-checkpoint values by FQN: a .safetensors file or a directory in Hugging Face's layout
// (fsdp/checkpoint_full.h), its checksums verified and its model config checked against `model`.
std::vector<std::pair<std::string, Tensor>> load_checkpoint(const std::string& path,
                                                            const GPTConfig& model) {
  io::SafetensorsFile f;
  if (std::filesystem::is_directory(path))
    f.tensors = load_full_checkpoint(path, &f.metadata);
  else
    f = io::load_safetensors(path);
  check_load_matches(path, f.metadata, model);
  return std::move(f.tensors);
}

class GptJobModel final : public JobModel {
 public:
  explicit GptJobModel(const GPTConfig& config) : config_(config) {}

  std::string description() const override {
    return fmt::format("GPT L{} D{} H{} T{} V{}", config_.layers, config_.d_model, config_.heads,
                       config_.seq, config_.vocab);
  }
  std::int64_t seq() const override { return config_.seq; }
  std::int64_t vocab_size() const override { return config_.vocab; }
  std::string block_class() const override { return "TransformerEncoderLayer"; }
  // 6N + 6*L*D*T: each parameter's multiply-add forward and two backward, and per layer the
  // attention scores and mixing (2*D*T each way, forward and backward) that no parameter counts.
  double flops_per_token(std::int64_t num_parameters) const override {
    return 6.0 * static_cast<double>(num_parameters) +
           6.0 * static_cast<double>(config_.layers * config_.d_model * config_.seq);
  }

  nn::ModulePtr build(bool /*sharded*/) const override { return std::make_shared<GPT>(config_); }

  std::vector<comm::NamedSetting> settings(nn::Module& built) const override {
    return {{"--layers", fmt::format("{}", config_.layers)},
            {"--vocab", fmt::format("{}", config_.vocab)},
            {"--d-model", fmt::format("{}", config_.d_model)},
            {"--heads", fmt::format("{}", config_.heads)},
            {"--seq", fmt::format("{}", config_.seq)},
            {"the model",
             fmt::format("GPT L{} D{} H{} T{} V{}, {}", config_.layers, config_.d_model,
                         config_.heads, config_.seq, config_.vocab, module_fingerprint(built))}};
  }

  JobIdentity identity(nn::Module& built) const override {
    JobIdentity job = gpt_model_identity(config_);
    for (const auto& [fqn, p] : built.named_parameters())
      job.emplace_back("parameter " + fqn, shape_str(p.shape()));
    return job;
  }

  void initialize(nn::Module& built) const override { gpt_init(built); }

  void load(const GPTTrainConfig& cfg, nn::Module& built,
            FullyShardedDataParallel* fsdp) const override {
    if (cfg.load_path.empty()) return;
    auto state = load_checkpoint(cfg.load_path, config_);
    if (fsdp != nullptr) {
      load_full_state_dict(*fsdp, state);
      return;
    }
    // The head holds the token embedding's tensor: a checkpoint names it once.
    std::vector<std::pair<std::string, Tensor>> with_tie = state;
    for (const auto& [name, t] : state)
      if (name == "tok_emb.weight") with_tie.emplace_back("head.weight", t);
    built.load_state_dict(with_tie);
  }

  Tensor loss(nn::Module& model, const Tensor& inputs, const Tensor& targets) const override {
    return gpt_loss(model, inputs, targets);
  }

  void save(const GPTTrainConfig& cfg, nn::Module& built, FullyShardedDataParallel* fsdp,
            int rank) const override {
    const std::map<std::string, std::string> metadata = gpt_full_checkpoint_metadata(config_);
    const bool one_file = cfg.save_path.ends_with(".safetensors");
    if (fsdp != nullptr && one_file) {
      // Streamed: each unit written as it is gathered, no copy of the model on rank 0.
      save_full_state_dict(*fsdp, cfg.save_path, metadata);
      return;
    }
    std::vector<std::pair<std::string, Tensor>> state;
    if (fsdp != nullptr) {
      state = full_state_dict(*fsdp, /*rank0_only=*/true);
    } else {
      for (const auto& [name, t] : built.named_parameters()) state.emplace_back(name, t);
    }
    if (rank == 0 && one_file)
      io::save_safetensors(cfg.save_path, state, metadata);
    else if (rank == 0)
      save_full_checkpoint(cfg.save_path, state, cfg.max_shard_bytes, metadata);
  }

 private:
  GPTConfig config_;
};

}  // namespace

std::shared_ptr<const JobModel> gpt_job_model(const GPTConfig& config) {
  return std::make_shared<GptJobModel>(config);
}

}  // namespace fsdp::examples
