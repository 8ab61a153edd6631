// A byte-level GPT-style language model built from torch.nn-compatible layers: token and
// position embeddings, pre-norm TransformerEncoderLayers with a causal mask, a final LayerNorm
// and a projection to the 256 byte values. Used by the demo and by the benchmarks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/module.h"
#include "core/nn/nn.h"
#include "core/ops.h"

namespace fsdp::examples {

struct TinyLMConfig {
  std::int64_t vocab = 256;
  std::int64_t context = 64;
  std::int64_t d_model = 128;
  std::int64_t heads = 4;
  std::int64_t layers = 2;
  double dropout = 0.0;
};

class TinyLM : public nn::Module {
 public:
  FSDP_MODULE_CLASS(TinyLM, nn::Module)
  explicit TinyLM(const TinyLMConfig& c, TensorOptions options = {});

  // tokens: int64 [batch, time] -> logits [batch, time, vocab]
  Tensor forward(const Tensor& tokens);
  nn::Value forward(const nn::Args& args) override { return forward(args.tensor(0)); }

  const TinyLMConfig config;

 private:
  Tensor causal_mask_;  // [context, context], -inf above the diagonal
};

// Next-byte cross-entropy of a [batch, time + 1] window of bytes.
Tensor lm_loss(TinyLM& model, const Tensor& window);

// A corpus of bytes and a seeded sampler of training windows.
class ByteCorpus {
 public:
  explicit ByteCorpus(std::vector<std::uint8_t> bytes) : bytes_(std::move(bytes)) {}
  static ByteCorpus from_files(const std::vector<std::string>& paths);
  std::size_t size() const { return bytes_.size(); }
  // [batch, context + 1] int64 windows starting at random offsets in [begin, end).
  Tensor sample(std::int64_t batch, std::int64_t context, std::size_t begin, std::size_t end,
                Generator& gen) const;

 private:
  std::vector<std::uint8_t> bytes_;
};

}  // namespace fsdp::examples
