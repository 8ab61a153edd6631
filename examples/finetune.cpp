// finetune: a Hugging Face causal LM (GPT-2, Llama) from a save_pretrained directory, trained
// with FSDP on llm.c token files, in one process (ranks as threads) or one process per rank
// under mpirun (--backend mpi|gloo|nccl); --save writes a save_pretrained directory again. The
// loop, options, checkpoints and output are train_gpt's (job_main.h): "step <i> loss <x>" per
// logged step, "held-out loss before X after Y". The data order is train_gpt's over tokens
// (gpt_data.h), so N ranks x batch B print the losses of one rank with batch N*B.
#include <fmt/format.h>

#include "core/error.h"
#include "examples/finetune_options.h"
#include "examples/hf_job_model.h"
#include "examples/job_main.h"
#include "examples/token_files.h"

using namespace fsdp;

namespace {

// The model from --model-dir, the default unit (its decoder blocks), then the token files.
void prepare(examples::TrainGptOptions& a) {
  examples::GPTTrainConfig& cfg = a.cfg;
  const std::int64_t seq = cfg.model.seq;
  cfg.job_model = examples::hf_job_model(a.model_dir, seq);
  if (cfg.policy.empty() && cfg.sharding)
    cfg.policy = fmt::format("transformer([{}])", cfg.job_model->block_class());
  const std::int64_t vocab = cfg.job_model->vocab_size();
  cfg.data = examples::read_token_data("--data", a.data_path, seq, vocab);
  if (!a.eval_path.empty())
    cfg.eval_data = examples::read_token_data("--eval-data", a.eval_path, seq, vocab);
}

}  // namespace

int main(int argc, char** argv) {
  return examples::job_main(argc, argv, {"finetune", examples::parse_finetune_options, prepare});
}
