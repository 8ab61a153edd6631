// torch.nn.Embedding: a lookup table of num_embeddings vectors of size embedding_dim.
#pragma once

#include <optional>

#include "core/module.h"
#include "core/nn/cloneable.h"

namespace fsdp::nn {

// torch's keyword arguments after (num_embeddings, embedding_dim).
struct EmbeddingOptions {
  std::optional<std::int64_t> padding_idx;  // negative counts from the end
  std::optional<double> max_norm;           // rows looked up are renormalised to this norm
  double norm_type = 2.0;
  bool scale_grad_by_freq = false;  // not supported: NotImplementedError in forward
  bool sparse = false;              // gradients are always dense here
  TensorOptions tensor = {};
};

// weight [num_embeddings, embedding_dim] ~ N(0, 1), with the padding_idx row zero (its gradient
// is zero too).
class Embedding : public Module, public Cloneable {
 public:
  FSDP_MODULE_CLASS(Embedding, Module)
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim,
            std::optional<std::int64_t> padding_idx = std::nullopt, TensorOptions options = {});
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, const EmbeddingOptions& o);

  Value forward(const Args& args) override { return forward(args.tensor(0)); }
  Tensor forward(const Tensor& indices);
  void reset_parameters() override;
  std::string extra_repr() const override;
  ModulePtr clone_structure() const override;

  const std::int64_t num_embeddings;
  const std::int64_t embedding_dim;
  const std::optional<std::int64_t> padding_idx;  // normalised to [0, num_embeddings)

 protected:
  // For subclasses that are classes of their own (transformers' Gemma3TextScaledWordEmbedding):
  // `cls` derives from Embedding.
  Embedding(const ModuleClass& cls, std::int64_t num_embeddings, std::int64_t embedding_dim,
            const EmbeddingOptions& o);
  const EmbeddingOptions& options() const { return options_; }

 private:
  EmbeddingOptions options_;
};

}  // namespace fsdp::nn
