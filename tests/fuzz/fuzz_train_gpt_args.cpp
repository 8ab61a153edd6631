// libFuzzer target: train_gpt's command line (examples/train_gpt_options.h) on arbitrary
// arguments (fuzz_argv.h): the parse, the range checks and the named choices must succeed or
// throw UsageError or ValueError; anything else escaping, a crash or a sanitizer report is a bug.
#include <cstdlib>

#include "examples/train_gpt_options.h"
#include "tests/fuzz/fuzz_argv.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace ex = fsdp::examples;
  const fsdp::fuzz::FuzzArgv args("train_gpt", data, size);
  try {
    const auto o = ex::parse_train_gpt_options(args.argc(), args.argv());
    if (!o.help.empty()) return 0;
    ex::check_train_gpt_options(o);
    (void)ex::parse_sharding(o.sharding);
    (void)ex::parse_prefetch(o.prefetch);
    (void)ex::parse_mixed_precision(o.mixed_precision);
  } catch (const fsdp::UsageError&) {
  } catch (const fsdp::ValueError&) {
  }
  return 0;
}
