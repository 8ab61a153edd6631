// libFuzzer target: train_lm's command line (examples/train_lm_options.h) on arbitrary arguments
// (fuzz_argv.h). It must succeed with every size in range or throw UsageError; anything else
// escaping, a crash or a sanitizer report is a bug.
#include <cstdlib>

#include "examples/train_lm_options.h"
#include "tests/fuzz/fuzz_argv.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fsdp::fuzz::FuzzArgv args("train_lm", data, size);
  try {
    const auto o = fsdp::examples::parse_train_lm_options(args.argc(), args.argv());
    if (!o.help.empty()) return 0;
    const auto& m = o.model;
    if (o.steps < 1 || o.batch < 1 || o.log_every < 1 || !(o.lr > 0) || m.layers < 1 ||
        m.context < 1 || m.heads < 1 || m.d_model % m.heads != 0)
      std::abort();  // accepted a value the job cannot run with
  } catch (const fsdp::UsageError&) {
  }
  return 0;
}
