// The train_gpt fixture (tests/fixtures/gpt/, made by tools/torch_reference/gen_gpt_fixtures.py):
// its model, data, initial weights, batch and steps as a GPTTrainConfig, and PyTorch's per-step
// losses and learning rate for each optimizer, for the tests that train the GPT.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "examples/gpt_train.h"

namespace fsdp::testing {

struct GptReference {
  examples::GPTTrainConfig base;  // model, steps, data, initial weights; global batch on one rank
  std::map<std::string, std::vector<double>> losses;  // optimizer -> PyTorch's per-step losses
  std::map<std::string, double> lr;
};

// Read from the fixture once, on first use.
const GptReference& gpt_reference();

}  // namespace fsdp::testing
