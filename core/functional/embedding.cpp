// embedding: rows of a (num_embeddings, embedding_dim) table gathered by integer indices of any
// shape; the output has shape indices.shape + [embedding_dim]. Backward scatter-adds the output
// gradient into the rows that were read, except the padding row, which gets no gradient.
//
// padding_idx: nullopt means "no padding row"; a negative one counts from the end (torch's
// F.embedding and nn.Embedding), through embedding_padding_row, which nn::Embedding calls too.
#include "core/dispatch/intercept.h"
#include "core/functional/functional_common.h"
#include "core/kernels/kernel_table.h"
#include "core/ops.h"

namespace fsdp {

std::optional<std::int64_t> embedding_padding_row(std::optional<std::int64_t> padding_idx,
                                                  std::int64_t num_embeddings) {
  if (!padding_idx) return padding_idx;
  FSDP_CHECK(
      *padding_idx >= -num_embeddings && *padding_idx < num_embeddings, AssertionError,
      "Padding_idx must be within num_embeddings (got {} for {} embeddings; valid: [{}, {}))",
      *padding_idx, num_embeddings, -num_embeddings, num_embeddings);
  return *padding_idx < 0 ? *padding_idx + num_embeddings : *padding_idx;
}

Tensor embedding(const Tensor& weight, const Tensor& indices,
                 std::optional<std::int64_t> padding_idx_arg) {
  FSDP_DISPATCH("embedding", embedding, weight, indices, padding_idx_arg);
  const char* op = "embedding";
  FSDP_CHECK(indices.dtype() == DType::Int64 || indices.dtype() == DType::Int32, TypeError,
             "embedding: expected indices of dtype int64 or int32, got {} (shape {})",
             dtype_name(indices.dtype()), shape_str(indices.shape()));
  FSDP_CHECK(weight.dim() == 2, ValueError,
             "embedding: weight must be 2-D (num_embeddings, embedding_dim), got shape {}",
             shape_str(weight.shape()));
  const std::int64_t rows = weight.size(0), dim = weight.size(1);
  const std::optional<std::int64_t> padding_idx = embedding_padding_row(padding_idx_arg, rows);
  Shape out_shape = indices.shape();
  out_shape.push_back(dim);
  const Device dev = common_device(op, {&weight, &indices});
  if (dev.is_meta()) return functional::meta_empty(out_shape, weight.dtype());

  // The rows gathered: index_select's kernel over one outer block; the kernel checks the
  // indices (no host read: on a GPU a bad one is reported at the next synchronisation).
  const IndexBounds bounds = embedding_bounds(rows, dim);
  Tensor out = new_tensor(out_shape, weight.dtype(), dev);
  kernels(dev).index_select(out, functional::contiguous_as(weight, weight.dtype()),
                            kernel_index(indices, dev), bounds, 1, dim);

  const Shape w_shape = weight.shape();
  const DType w_dtype = weight.dtype();
  autograd::record("EmbeddingBackward", {weight, indices}, {out}, {indices},
                   [w_shape, w_dtype, padding_idx, bounds](const autograd::variable_list& saved,
                                                           const autograd::variable_list& grads) {
                     autograd::variable_list result(2);
                     if (!grads[0].defined()) return result;
                     const DType cd = functional::compute_dtype(w_dtype);
                     Tensor g = functional::contiguous_as(grads[0], cd);
                     const Device dev = g.device();
                     Tensor gw = zeros(w_shape, TensorOptions(cd, dev));
                     kernels(dev).index_add(gw, g, kernel_index(saved[0], dev), bounds, 1,
                                            w_shape[1]);
                     // The padding row gets no gradient.
                     if (padding_idx) narrow(gw, 0, *padding_idx, 1).fill_(0.0);
                     result[0] = functional::to_result_dtype(gw, w_dtype);
                     return result;
                   });
  return out;
}

}  // namespace fsdp
