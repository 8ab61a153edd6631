// The inverse of model_file.h: a module tree written as an fsdp-model/1 document (class and
// ancestors, parameters with shapes and dtypes, buffers, children; ids and refs for shared
// modules and tied parameters), so that fsdp-plan plans a C++-built model exactly as the runtime
// will wrap it. Build the model on the meta device to export it without allocating.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/module.h"

namespace fsdp::plan {

std::string model_to_json(nn::Module& root);
// A module's hyperparameters that its parameter shapes do not show, the "attributes" of its
// model-file entry: MultiheadAttention num_heads and dropout, a dropout's p,
// TransformerEncoderLayer activation and norm_first; empty for other classes.
nlohmann::json module_hyperparameters(const nn::Module& m);
// Writes model_to_json(root) to `path`; ValueError naming the path when it cannot be written.
void write_model_file(nn::Module& root, const std::string& path);

}  // namespace fsdp::plan
