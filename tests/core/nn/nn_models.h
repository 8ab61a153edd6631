// The models that gen_nn_fixtures.py builds in PyTorch, built here under the same case names.
#pragma once

#include <string>

#include "core/nn/nn.h"

namespace fsdp::nn::testing {

// The model of nn_structure.json case `name` (TensorOptions give dtype/device).
ModulePtr structure_model(const std::string& name, TensorOptions options = {});

}  // namespace fsdp::nn::testing
