#include "examples/hf_job_model.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/input_error.h"
#include "core/io/checksum.h"
#include "core/io/safetensors_dir.h"
#include "examples/gpt_train.h"
#include "fsdp/full_state_dict.h"
#include "fsdp/fully_sharded_data_parallel.h"
#include "fsdp/load_sharded.h"
#include "models/auto_model.h"
#include "models/load_weights.h"
#include "models/pretrained.h"

namespace fsdp::examples {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The tokenizer's files of a model directory, which a hub directory carries beside the weights
// and transformers' Trainer saves with the model: copied to the saved directory, so that
// generate and AutoTokenizer find them there (the fast tokenizer's file, its config and chat
// template, and the slow tokenizers' files: SentencePiece's model, BPE's vocab and merges).
void copy_tokenizer_files(const std::string& from, const std::string& to) {
  namespace fs = std::filesystem;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "added_tokens.json", "chat_template.jinja", "chat_template.json",
                           "tokenizer.model", "vocab.json", "merges.txt"}) {
    const fs::path source = fs::path(from) / name;
    std::error_code ec;
    if (!fs::exists(source, ec)) continue;
    fs::copy_file(source, fs::path(to) / name, fs::copy_options::overwrite_existing, ec);
    FSDP_CHECK(!ec, InputError, "--save: cannot copy '{}' to '{}': {}", source.string(), to,
               ec.message());
  }
}

// DIR's config (its errors first), untied where DIR's weights hold the tied pair apart.
models::ModelConfig config_for_weights(const std::string& dir) {
  models::ModelConfig config = models::load_config(dir);
  return models::untie_where_files_differ(std::move(config), models::open_pretrained_weights(dir));
}

class HfJobModel final : public JobModel {
 public:
  HfJobModel(std::string dir, std::int64_t seq)
      : dir_(std::move(dir)),
        seq_(seq),
        config_(config_for_weights(dir_)),
        generation_config_(models::read_generation_config(dir_)) {
    const auto meta = models::make_causal_lm(config_, TensorOptions(DType::Float32, kMeta));
    class_name_ = meta->type_name();
    vocab_size_ = meta->vocab_size();
    block_class_ = models::decoder_block_class(*meta);
    FSDP_CHECK(seq_ <= meta->max_positions() || class_name_ != "GPT2LMHeadModel", ValueError,
               "--seq {}: {} has {} positions (n_positions in {}/config.json)", seq_, class_name_,
               meta->max_positions(), dir_);
    const std::string config = read_text((std::filesystem::path(dir_) / "config.json").string());
    config_xxh3_ = io::xxh3_hex(config.data(), config.size());
  }

  std::string description() const override {
    return fmt::format("{} from {}, T{}", class_name_, dir_, seq_);
  }
  std::int64_t seq() const override { return seq_; }
  std::int64_t vocab_size() const override { return vocab_size_; }
  std::string block_class() const override { return block_class_; }

  nn::ModulePtr build(bool sharded) const override {
    // Sharded: shapes only; FSDP gives each unit storage and load() fills this rank's shards.
    // Unsharded: storage without transformers' random initialisation, which load() overwrites.
    if (sharded) return models::make_causal_lm(config_, TensorOptions(DType::Float32, kMeta));
    return models::make_causal_lm_for_loading(config_);
  }

  std::vector<comm::NamedSetting> settings(nn::Module& built) const override {
    return {{"--model-dir", fmt::format("{}, config.json xxh3 {}", class_name_, config_xxh3_)},
            {"--seq", fmt::format("{}", seq_)},
            {"the model", module_fingerprint(built)}};
  }

  JobIdentity identity(nn::Module& built) const override {
    JobIdentity job = {
        {"model", class_name_}, {"config_xxh3", config_xxh3_}, {"seq", std::to_string(seq_)}};
    for (const auto& [fqn, p] : built.named_parameters())
      job.emplace_back("parameter " + fqn, shape_str(p.shape()));
    return job;
  }

  // The weights come from the directory (load): nothing random to draw.
  void initialize(nn::Module&) const override {}
  // FSDP materialises a meta unit with storage and calls this: the files fill it (load()).
  // FSDP gives each meta unit storage (its flat buffer's, no copy) and load() fills it.
  policies::ParamInitFn param_init_fn() const override { return allocate_only(); }

  void load(const GPTTrainConfig& cfg, nn::Module& built,
            FullyShardedDataParallel* fsdp) const override {
    FSDP_CHECK(cfg.load_path.empty(), ValueError,
               "finetune: the starting weights are --model-dir's (--load is train_gpt's)");
    const io::SafetensorsDir files = models::open_pretrained_weights(dir_);
    if (fsdp == nullptr) {
      models::load_pretrained_weights(built, files);
      return;
    }
    const models::CheckpointNames names = models::checkpoint_names(built, files);
    const std::vector<std::string> unexpected =
        load_sharded_from(*fsdp, files, {names.name_in_file, names.ignore_unexpected});
    if (!unexpected.empty())
      throw InputError(fmt::format("{}: tensor '{}' is not a parameter or buffer of {}",
                                   files.path(), unexpected.front(), class_name_));
    // What no file holds (the rotary embedding's inv_freq): computed.
    for (const auto& [name, module] : built.named_modules()) models::init_computed_buffers(*module);
  }

  Tensor loss(nn::Module& model, const Tensor& inputs, const Tensor& targets) const override {
    return models::causal_lm_loss(model(inputs).tensor(), targets);
  }

  void save(const GPTTrainConfig& cfg, nn::Module& built, FullyShardedDataParallel* fsdp,
            int rank) const override {
    std::vector<std::pair<std::string, Tensor>> state;
    if (fsdp != nullptr)
      state = full_state_dict(*fsdp, /*rank0_only=*/true);
    else
      state = built.state_dict();
    if (rank == 0) {
      // The source's generation_config.json (its EOS ids, sampling defaults) goes with the model.
      auto& lm = dynamic_cast<models::CausalLM&>(built);
      lm.generation_config = generation_config_;
      models::save_pretrained(cfg.save_path, lm, state, cfg.max_shard_bytes);
      copy_tokenizer_files(dir_, cfg.save_path);
    }
  }

 private:
  std::string dir_;
  std::int64_t seq_, vocab_size_ = 0;
  models::ModelConfig config_;  // untied where the files hold the tied pair apart
  nlohmann::json generation_config_;
  std::string class_name_, block_class_, config_xxh3_;
};

}  // namespace

std::shared_ptr<const JobModel> hf_job_model(const std::string& dir, std::int64_t seq) {
  return std::make_shared<HfJobModel>(dir, seq);
}

}  // namespace fsdp::examples
