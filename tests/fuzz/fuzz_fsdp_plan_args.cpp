// libFuzzer target: fsdp-plan's command line (tools/plan/command_line.h) on arbitrary arguments
// (fuzz_argv.h). Parsing and turning the options into plan options must succeed or throw
// UsageError (exit 2) or InputError (exit 1); anything else escaping, a crash or a sanitizer
// report is a bug.
#include <cstdlib>

#include "core/input_error.h"
#include "tests/fuzz/fuzz_argv.h"
#include "tools/plan/command_line.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fsdp::fuzz::FuzzArgv args("fsdp-plan", data, size);
  try {
    const auto cl = fsdp::plan::parse_command_line(args.argc(), args.argv());
    if (cl.help.empty()) (void)fsdp::plan::plan_options(cl);
  } catch (const fsdp::UsageError& e) {
    if (e.exit_code() != 2) std::abort();
  } catch (const fsdp::InputError&) {
  }
  return 0;
}
