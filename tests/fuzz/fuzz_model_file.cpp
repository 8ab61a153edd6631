// libFuzzer target: the model-file reader (tools/plan/model_file.h) on arbitrary bytes. A damaged
// file must be an InputError naming it; anything else escaping, a crash, a sanitizer report or a
// slow input is a bug.
#include <cstdlib>
#include <cstring>
#include <string>

#include "tools/plan/model_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    (void)fsdp::plan::parse_model(text, "input.json");
  } catch (const fsdp::InputError& e) {
    if (std::strstr(e.what(), "input.json") == nullptr) std::abort();
  }
  return 0;
}
