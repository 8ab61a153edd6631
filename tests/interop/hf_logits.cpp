// interop_hf_logits: the logits of a save_pretrained GPT-2 or Llama directory read by our
// models/ (from_pretrained: one file or shards with the index), for the transformers side of
// tests/interop/test_hf_interop.py, written as safetensors ("logits" [1, S, V] float32).
//   interop_hf_logits DIR IDS OUT       (IDS: comma-separated token ids)
#include <fmt/format.h>

#include <sstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/io/safetensors.h"
#include "models/pretrained.h"

using namespace fsdp;

int main(int argc, char** argv) {
  if (argc != 4) {
    fmt::print(stderr, "usage: {} DIR IDS OUT\n", argv[0]);
    return 2;
  }
  try {
    std::vector<std::int64_t> ids;
    std::stringstream text(argv[2]);
    for (std::string item; std::getline(text, item, ',');) ids.push_back(std::stoll(item));
    auto model = models::from_pretrained(argv[1]);
    model->eval();
    autograd::NoGradGuard no_grad;
    const Tensor logits = model->forward(from_vector(ids, {1, std::int64_t(ids.size())}));
    io::save_safetensors(argv[3], {{"logits", logits}});
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "interop_hf_logits: error: {}\n", e.what());
    return 1;
  }
}
