// finetune's command line, apart from main() so that a fuzzer and tests can call it: the Hugging
// Face directory and the token files, --seq and --weight-decay, and every option of train_gpt's
// job (add_training_options: FSDP, backends, checkpoints, evaluation). A bad command line is a
// UsageError ending "(see finetune --help)".
#pragma once

#include "examples/train_gpt_options.h"

namespace fsdp::examples {

// Parses argv (argv[0] is the program). --policy absent: one unit per decoder block, chosen once
// the model's class is known (policy_given false).
TrainGptOptions parse_finetune_options(int argc, const char* const* argv);

}  // namespace fsdp::examples
