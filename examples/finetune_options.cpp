#include "examples/finetune_options.h"

#include <CLI/CLI.hpp>

#include "core/io/safetensors_dir.h"
#include "examples/cli_checks.h"

namespace fsdp::examples {

TrainGptOptions parse_finetune_options(int argc, const char* const* argv) {
  CLI::App app{
      "Fine-tune a Hugging Face causal LM (GPT-2, Llama) from a save_pretrained directory with "
      "FSDP on llm.c token files (fsdp-cpp)"};
  TrainGptOptions o;
  o.program = "finetune";
  o.cfg.policy.clear();  // absent: one unit per decoder block (finetune.cpp)
  o.cfg.max_shard_bytes = io::kDefaultMaxShardBytes;  // save_pretrained's default, 50GB
  add_training_options(app, o);
  app.add_option("--model-dir", o.model_dir,
                 "a save_pretrained directory: config.json and model.safetensors (or shards "
                 "with model.safetensors.index.json)")
      ->required();
  app.add_option("--seq", o.cfg.model.seq,
                 "tokens per sequence (T; at most the model's positions for GPT-2)")
      ->capture_default_str()
      ->check(int_range(1, 1 << 20));
  app.add_option("--weight-decay", o.cfg.weight_decay,
                 "the optimizer's weight decay (default: torch's, AdamW 0.01, SGD 0)")
      ->check(finite_number(true));
  // The help of the shared options speaks of train_gpt's files; finetune's are token files.
  app.get_option("--data")
      ->description(
          "training tokens: an llm.c token file (uint16 GPT-2 or uint32 Llama 3 header; "
          "examples/tokenize writes one)")
      ->required();
  app.get_option("--eval-data")->description("held-out tokens: loss before and after training");
  app.get_option("--policy")
      ->description(
          "auto-wrap policy (fsdp-plan's grammar); default: one unit per decoder block, "
          "transformer([GPT2Block]) or transformer([LlamaDecoderLayer])");
  app.get_option("--save")->description(
      "write the trained model as a save_pretrained directory (config.json, safetensors, "
      "sharded above --max-shard-size), which transformers loads");
  parse_job_options(app, o, argc, argv);
  return o;
}

}  // namespace fsdp::examples
