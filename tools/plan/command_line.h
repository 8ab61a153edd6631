// fsdp-plan's command line: the options as written (parse_command_line) and the plan options
// they give (plan_options). Apart from main() so that a fuzzer can call them (tests/fuzz).
#pragma once

#include <string>
#include <vector>

#include "core/usage_error.h"
#include "tools/plan/planner.h"

namespace fsdp::plan {

struct CommandLine {
  std::string help;  // not empty: --help was given; print this on stdout and exit 0
  std::string model_path, policy, sharding = "FULL_SHARD", format = "table";
  std::vector<std::string> ignore;
  bool node_size_given = false;
  PlanOptions opts;  // the options bound directly (world size, node size, batch, ...)
};

// Parses argv (argv[0] is the program); a malformed command line throws UsageError
// "what is wrong (see fsdp-plan --help)" (exit status 2).
CommandLine parse_command_line(int argc, const char* const* argv);

// The plan's options: the sharding strategy, the node size checked against the world size and
// the --policy expression parsed; a bad value throws InputError (exit status 1).
PlanOptions plan_options(const CommandLine& cl);

// The error contract is one line: lines are joined with spaces, keeping every word.
std::string one_line(std::string s);

}  // namespace fsdp::plan
