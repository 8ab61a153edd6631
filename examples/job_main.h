// The main() of a training program (train_gpt, finetune): the command line checked before any
// work, the launch (ranks as threads, or one process per rank under mpirun), one line per logged
// step ("step <i> loss <x> tokens/s <n>"), the summary (throughput, exposed communication, held-out
// loss, per-rank peak memory) and the one-line errors with their exit statuses (2: the command
// line or launch environment; 1: the run).
#pragma once

#include <functional>

#include "examples/train_gpt_options.h"

namespace fsdp::examples {

struct JobProgram {
  const char* name;  // "train_gpt": in every message
  // The command line, parsed (argv[0] is the program); a malformed one throws UsageError.
  std::function<TrainGptOptions(int argc, const char* const* argv)> parse;
  // After the checks: reads the data and sets the job's model (cfg.data, cfg.eval_data,
  // cfg.job_model), printing what it wrote; an error ends the run (exit 1).
  std::function<void(TrainGptOptions&)> prepare;
};

int job_main(int argc, char** argv, const JobProgram& program);

}  // namespace fsdp::examples
