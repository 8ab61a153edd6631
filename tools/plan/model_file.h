// Reading model files of format "fsdp-model/1" (tools/README.md): a module tree built on the
// meta device, with shared modules (one object in two slots) and tied parameters (one tensor in
// two slots) restored from the file's ids.
#pragma once

#include <memory>
#include <string>

#include "core/input_error.h"
#include "core/module.h"

namespace fsdp::plan {

inline constexpr const char* kModelFormat = "fsdp-model/1";
// A module's "attributes" (hyperparameters such as num_heads) become module attributes named
// with this prefix: "hparam.num_heads".
inline constexpr const char* kHyperparameterPrefix = "hparam.";

struct LoadedModel {
  nn::ModulePtr root;
  std::size_t num_definitions = 0;  // module objects in the file (shared ones once)
  // The parsed document, freed with this object: freeing a 100 MB JSON tree takes as long as
  // building the modules, so a command-line tool that exits right away never pays for it.
  std::shared_ptr<const void> document;
};

// Parses `text`; `source` names it in messages ("model.json").
LoadedModel parse_model(const std::string& text, const std::string& source);
// Reads and parses the file at `path`.
LoadedModel load_model(const std::string& path);

// 1-based line and column of byte `offset` in `text` (columns count bytes).
std::pair<std::size_t, std::size_t> line_and_column(const std::string& text, std::size_t offset);

}  // namespace fsdp::plan
