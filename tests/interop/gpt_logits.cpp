// interop_gpt_logits: the logits of train_gpt's GPT on batch 0 of the data, from a full
// checkpoint, written as safetensors ("logits" [B, T, V] float32, "inputs" [B, T] int64) for the
// PyTorch side of tests/interop to compare against.
//   interop_gpt_logits CHECKPOINT DATA OUT LAYERS D_MODEL HEADS SEQ BATCH
// CHECKPOINT: a .safetensors file or a directory in Hugging Face's layout; the tied head.weight
// may be absent (it is tok_emb.weight).
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/autograd.h"
#include "core/error.h"
#include "core/io/safetensors.h"
#include "examples/gpt.h"
#include "examples/gpt_data.h"
#include "fsdp/checkpoint_full.h"

using namespace fsdp;

int main(int argc, char** argv) {
  if (argc != 9) {
    fmt::print(stderr, "usage: {} CHECKPOINT DATA OUT LAYERS D_MODEL HEADS SEQ BATCH\n", argv[0]);
    return 2;
  }
  try {
    const std::string checkpoint = argv[1], data_path = argv[2], out = argv[3];
    examples::GPTConfig cfg;
    cfg.layers = std::stoll(argv[4]);
    cfg.d_model = std::stoll(argv[5]);
    cfg.heads = std::stoll(argv[6]);
    cfg.seq = std::stoll(argv[7]);
    const std::int64_t batch = std::stoll(argv[8]);

    NamedTensors state = std::filesystem::is_directory(checkpoint)
                             ? load_full_checkpoint(checkpoint)
                             : io::load_safetensors(checkpoint).tensors;
    bool has_head = false;
    for (const auto& [name, t] : state) has_head = has_head || name == "head.weight";
    if (!has_head)
      for (const auto& [name, t] : NamedTensors(state))
        if (name == "tok_emb.weight") state.emplace_back("head.weight", t);
    examples::GPT gpt(cfg);
    gpt.load_state_dict(state);

    std::ifstream in(data_path, std::ios::binary);
    FSDP_CHECK(in.good(), ValueError, "interop_gpt_logits: cannot open {}", data_path);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    const examples::TokenBatch b = examples::gpt_batch(bytes.str(), 0, batch, 1, 0, cfg.seq);
    autograd::NoGradGuard no_grad;
    const Tensor logits = gpt.forward(b.inputs);
    io::save_safetensors(out, {{"logits", logits}, {"inputs", b.inputs}});
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "interop_gpt_logits: error: {}\n", e.what());
    return 1;
  }
}
