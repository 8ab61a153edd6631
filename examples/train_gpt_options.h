// train_gpt's command line, apart from main() so that a fuzzer can call it (tests/fuzz): the
// options as written, their ranges and combinations, and the named choices turned into the job's
// settings. A bad command line is a UsageError whose message ends "(see train_gpt --help)"; main
// prints it as "train_gpt: error: <message>" and exits with its status (2).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/usage_error.h"

namespace CLI {
class App;
}
#include "examples/gpt_train.h"

namespace fsdp::examples {

struct TrainGptOptions {
  std::string program = "train_gpt";  // in messages: "(see <program> --help)"
  std::string help;  // not empty: --help was given; print this on stdout and exit 0
  GPTTrainConfig cfg;
  std::string export_path, data_path, eval_path;
  std::string model_dir;  // finetune: the Hugging Face directory trained
  std::string backend = "threads", sharding = "FULL_SHARD", prefetch = "pre";
  std::string mixed_precision = "none";
  std::string device = "cpu";                        // --device: cpu | fake_cuda[:N] | cuda[:N]
  std::string float32_matmul_precision = "highest";  // torch.set_float32_matmul_precision
  int ranks = 2, log_every = 1, threads_per_rank = 1;
  bool ranks_given = false, node_size_given = false, backward_prefetch_given = false;
  std::vector<std::string> allow_change;  // --allow-change, into cfg.allow_changes
  // train_gpt: uniform token ids in [0, --vocab) from --seed instead of --data (timing runs).
  bool synthetic_tokens = false;
  double peak_tflops = 0;  // --peak-tflops: the MFU's peak (0: the device's, when known)
};

// The options every training job takes (train_gpt's and finetune's): batch, steps, optimizer,
// data, devices, backends, FSDP, checkpoints, logging -- all but the model's.
void add_training_options(CLI::App& app, TrainGptOptions& options);

// Parses argv with `app` (whose options write into `options`): --help fills options.help; a
// malformed command line is a UsageError naming the program's --help.
void parse_job_options(CLI::App& app, TrainGptOptions& options, int argc, const char* const* argv);

// Parses argv (argv[0] is the program): every size in its range; a malformed command line throws
// UsageError.
TrainGptOptions parse_train_gpt_options(int argc, const char* const* argv);

// The options as a whole: sets cfg.sharding, cfg.backward_prefetch and cfg.mixed_precision from
// their names and parses --policy. A combination that cannot run throws UsageError; an unknown
// name throws ValueError naming the flag, a bad policy InputError naming the column.
void check_train_gpt_options(TrainGptOptions& o);

// --sharding, --backward-prefetch and --mixed-precision by name ("none": absent); an unknown
// name throws ValueError listing the choices.
std::optional<policies::ShardingStrategy> parse_sharding(const std::string& s);
std::optional<policies::BackwardPrefetch> parse_prefetch(const std::string& s);
std::optional<DType> parse_mixed_precision(const std::string& s);

}  // namespace fsdp::examples
