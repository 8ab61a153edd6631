// train_lm's command line, apart from main() so that a fuzzer can call it (tests/fuzz).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/usage_error.h"
#include "examples/tiny_lm.h"

namespace fsdp::examples {

struct TrainLmOptions {
  std::string help;  // not empty: --help was given; print this on stdout and exit 0
  TinyLMConfig model;
  int steps = 300;
  std::int64_t batch = 16;
  double lr = 3e-3;
  std::uint64_t seed = 0;
  int log_every = 10;
  std::vector<std::string> texts;  // empty: Debian's license texts
};

// Parses argv (argv[0] is the program): every size in its range and the model's shape whole; a
// bad command line throws UsageError "--flag: what is wrong ..." (exit status 2).
TrainLmOptions parse_train_lm_options(int argc, const char* const* argv);

}  // namespace fsdp::examples
