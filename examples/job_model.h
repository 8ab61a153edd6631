// The model a training job trains, as the loop (train_gpt() in gpt_train.h) sees it: train_gpt's
// byte-level GPT (gpt_job_model.h) and finetune's Hugging Face causal LM (hf_job_model.h) run
// the same steps, FSDP options, checkpoints and evaluation; what differs is here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/agreement.h"
#include "core/module.h"
#include "core/tensor.h"
#include "fsdp/checkpoint_job.h"
#include "policies/options.h"

namespace fsdp {
class FullyShardedDataParallel;
}

namespace fsdp::examples {

struct GPTTrainConfig;

class JobModel {
 public:
  virtual ~JobModel() = default;
  // Printed once: "GPT L4 D256 H4 T128", "LlamaForCausalLM from DIR".
  virtual std::string description() const = 0;
  // Tokens per sequence (T) of the job's batches.
  virtual std::int64_t seq() const = 0;
  // Token ids the model embeds (0 .. vocab_size - 1).
  virtual std::int64_t vocab_size() const = 0;
  // FLOP per trained token, llm.c's count (mfu.h), for a model of `num_parameters` (a tied
  // weight once); 0 where the model gives none.
  virtual double flops_per_token(std::int64_t /*num_parameters*/) const { return 0; }
  // The blocks: activation checkpointing's class (and the usual wrapping unit).
  virtual std::string block_class() const = 0;
  // The model on each rank, after manual_seed(seed) and before wrapping. `sharded`: FSDP will
  // wrap it (a model loaded from files is then built on meta and materialised unit by unit).
  virtual nn::ModulePtr build(bool sharded) const = 0;
  // The model's part of what every rank must agree on, by command-line names.
  virtual std::vector<comm::NamedSetting> settings(nn::Module& built) const = 0;
  // The model's part of a checkpoint's job identity (config and parameter shapes).
  virtual JobIdentity identity(nn::Module& built) const = 0;
  // The random initialisation of the built model, after the ranks agreed (before wrapping).
  virtual void initialize(nn::Module& built) const = 0;
  // FSDP's param_init_fn for a model built on meta (none: the model is built on the host).
  virtual policies::ParamInitFn param_init_fn() const { return {}; }
  // Weights from files, once the model is wrapped (`fsdp`) or not (`fsdp` null): a checkpoint
  // (cfg.load_path) or the model's own directory.
  virtual void load(const GPTTrainConfig& cfg, nn::Module& built,
                    FullyShardedDataParallel* fsdp) const = 0;
  // Mean loss of the batch; inputs and targets [B, T] int64.
  virtual Tensor loss(nn::Module& model, const Tensor& inputs, const Tensor& targets) const = 0;
  // Writes the trained weights to cfg.save_path (every rank calls it; rank 0 writes).
  virtual void save(const GPTTrainConfig& cfg, nn::Module& built, FullyShardedDataParallel* fsdp,
                    int rank) const = 0;
};

// "<N> parameters, fingerprint <16 hex digits>": every module and parameter by name, class,
// shape and dtype, equal only for the same model built by the same code (the ranks' agreement).
std::string module_fingerprint(nn::Module& model);

}  // namespace fsdp::examples
