#include "examples/job_model.h"

#include <fmt/format.h>

namespace fsdp::examples {

std::string module_fingerprint(nn::Module& model) {
  std::string text;
  for (const auto& [name, m] : model.named_modules())
    text += fmt::format("|{}:{}", name, m->type_name());
  for (const auto& [name, p] : model.named_parameters()) {
    text += fmt::format("|{}:{}:", name, dtype_name(p.dtype()));
    for (std::int64_t size : p.sizes()) text += fmt::format("{},", size);
  }
  return fmt::format("{} parameters, fingerprint {:016x}", model.num_parameters(),
                     comm::hash64(text));
}

}  // namespace fsdp::examples
