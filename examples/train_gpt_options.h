// train_gpt's command line, apart from main() so that a fuzzer can call it (tests/fuzz): the
// options as written, their checks, and the named choices turned into the job's settings.
#pragma once

#include <optional>
#include <string>

#include "core/usage_error.h"
#include "examples/gpt_train.h"

namespace fsdp::examples {

struct TrainGptOptions {
  std::string help;  // not empty: --help was given; print this on stdout and exit 0
  GPTTrainConfig cfg;
  std::string export_path, data_path, eval_path, backend = "threads", sharding = "FULL_SHARD",
                                                 prefetch = "pre", mixed_precision = "none";
  int ranks = 2, log_every = 1, threads_per_rank = 1;
};

// Parses argv (argv[0] is the program); a malformed command line throws UsageError with CLI11's
// message and exit status.
TrainGptOptions parse_train_gpt_options(int argc, const char* const* argv);

// The values' ranges: a bad one throws ValueError naming the flag (exit status 1).
void check_train_gpt_options(const TrainGptOptions& o);

// --sharding, --backward-prefetch and --mixed-precision by name ("none": absent); an unknown
// name throws ValueError listing the choices.
std::optional<policies::ShardingStrategy> parse_sharding(const std::string& s);
std::optional<policies::BackwardPrefetch> parse_prefetch(const std::string& s);
std::optional<DType> parse_mixed_precision(const std::string& s);

}  // namespace fsdp::examples
