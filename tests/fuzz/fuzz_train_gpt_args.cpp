// libFuzzer target: train_gpt's command line (examples/train_gpt_options.h) on arbitrary
// arguments (fuzz_argv.h): the parse, the range checks and the named choices must succeed or
// throw UsageError, ValueError or InputError; anything else escaping, a crash or a sanitizer
// report is a bug.
#include <cstdlib>

#include "core/input_error.h"
#include "examples/train_gpt_options.h"
#include "tests/fuzz/fuzz_argv.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace ex = fsdp::examples;
  const fsdp::fuzz::FuzzArgv args("train_gpt", data, size);
  try {
    auto o = ex::parse_train_gpt_options(args.argc(), args.argv());
    if (!o.help.empty()) return 0;
    ex::check_train_gpt_options(o);  // the named choices and --policy too
  } catch (const fsdp::UsageError&) {
  } catch (const fsdp::ValueError&) {
  } catch (const fsdp::InputError&) {  // a bad --policy, with its column
  }
  return 0;
}
