// The token files a job names (--data, --eval-data): llm.c's format (models/tokenizer/token_file.h)
// read for finetune's models and for train_gpt's GPT with --vocab other than 256.
#pragma once

#include <cstdint>
#include <string>

#include "examples/token_data.h"

namespace fsdp::examples {

// The ids of the token file `path`, named by `option` ("--data"), each below `vocab` and enough
// for one sequence of `seq` and its next token. Errors are ValueErrors "<option>: <path>: ...",
// naming the token and its index when one is not below the vocabulary.
TokenData read_token_data(const char* option, const std::string& path, std::int64_t seq,
                          std::int64_t vocab);

}  // namespace fsdp::examples
