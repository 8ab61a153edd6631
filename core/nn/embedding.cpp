#include "core/nn/embedding.h"

#include <cmath>
#include <set>
#include <vector>

#include "core/autograd.h"
#include "core/kernels/kernel_table.h"
#include "core/nn/init.h"
#include "core/nn/repr_utils.h"
#include "core/ops.h"

namespace fsdp::nn {

namespace {
// Scales the rows of `weight` selected by `indices` whose norm exceeds max_norm down to it
// (torch.embedding_renorm_), in place and outside autograd.
void renorm_rows(const Tensor& weight, const Tensor& indices, double max_norm, double norm_type) {
  const Device dev = common_device("embedding_renorm_", {&weight, &indices});
  if (dev.is_meta()) return;
  FSDP_CHECK(weight.is_contiguous(), RuntimeError, "embedding_renorm_: weight must be contiguous");
  // A host read of the indices, kept: max_norm is off the training path (GPT's embeddings
  // have none), so it costs no step a synchronisation (the kernels' indices stay on the device).
  std::set<std::int64_t> rows;
  for (auto i : indices.to_int_vector()) rows.insert(i);
  kernels(dev).embedding_renorm_(weight, std::vector<std::int64_t>(rows.begin(), rows.end()),
                                 max_norm, norm_type);
  weight.storage()->bump_version();
}
}  // namespace

Embedding::Embedding(std::int64_t num, std::int64_t dim, std::optional<std::int64_t> padding_idx,
                     TensorOptions options)
    : Embedding(num, dim, EmbeddingOptions{padding_idx, std::nullopt, 2.0, false, false, options}) {
}

Embedding::Embedding(std::int64_t num, std::int64_t dim, const EmbeddingOptions& o)
    : Embedding(static_class(), num, dim, o) {}

Embedding::Embedding(const ModuleClass& cls, std::int64_t num, std::int64_t dim,
                     const EmbeddingOptions& o)
    : Module(cls),
      num_embeddings(num),
      embedding_dim(dim),
      padding_idx(embedding_padding_row(o.padding_idx, num)),
      options_(o) {
  options_.tensor = o.tensor.with_requires_grad(false);
  options_.padding_idx = padding_idx;
  register_parameter("weight", empty({num, dim}, options_.tensor));
  reset_parameters();
}

void Embedding::reset_parameters() {
  const Tensor& w = param("weight");
  init::normal_(w);
  if (padding_idx && !w.is_meta()) {
    autograd::NoGradGuard no_grad;
    make_view(w, {embedding_dim}, {w.stride(1)}, w.storage_offset() + *padding_idx * w.stride(0))
        .fill_(0.0);
  }
}

Tensor Embedding::forward(const Tensor& indices) {
  FSDP_CHECK(!options_.scale_grad_by_freq, NotImplementedError,
             "Embedding: scale_grad_by_freq=True is not supported");
  const Tensor& w = param("weight");
  if (options_.max_norm) renorm_rows(w, indices, *options_.max_norm, options_.norm_type);
  return embedding(w, indices, padding_idx);
}

std::string Embedding::extra_repr() const {
  std::string s = fmt::format("{}, {}", num_embeddings, embedding_dim);
  if (padding_idx) s += fmt::format(", padding_idx={}", *padding_idx);
  if (options_.max_norm) s += ", max_norm=" + py_float(*options_.max_norm);
  if (options_.norm_type != 2.0) s += ", norm_type=" + py_float(options_.norm_type);
  if (options_.scale_grad_by_freq) s += ", scale_grad_by_freq=True";
  if (options_.sparse) s += ", sparse=True";
  return s;
}

ModulePtr Embedding::clone_structure() const {
  EmbeddingOptions o = options_;
  o.tensor = o.tensor.with_device(kMeta);
  return std::make_shared<Embedding>(num_embeddings, embedding_dim, o);
}

}  // namespace fsdp::nn
