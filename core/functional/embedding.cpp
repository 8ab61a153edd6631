// embedding: rows of a (num_embeddings, embedding_dim) table gathered by integer indices of any
// shape; the output has shape indices.shape + [embedding_dim]. Backward scatter-adds the output
// gradient into the rows that were read, except the padding row, which gets no gradient.
//
// padding_idx: a negative value means "no padding row" (this is the default of ops.h). torch's
// F.embedding also accepts negative padding_idx counting from the end; nn::Embedding normalises
// it to a non-negative row before calling, as torch's module does.
#include <cstring>
#include <vector>

#include "core/dispatch/intercept.h"
#include "core/functional/functional_common.h"
#include "core/ops.h"

namespace fsdp {
namespace {

// Indices as int64 in row-major order, each checked against the table size.
std::vector<std::int64_t> checked_indices(const Tensor& indices, std::int64_t rows,
                                          const Shape& weight_shape) {
  Tensor idx = functional::contiguous_as(indices, indices.dtype());
  const std::int64_t n = idx.numel();
  std::vector<std::int64_t> out(static_cast<std::size_t>(n));
  auto check_copy = [&]<typename I>() {
    const I* p = idx.data<I>();
    for (std::int64_t i = 0; i < n; ++i) {
      const auto v = static_cast<std::int64_t>(p[i]);
      FSDP_CHECK(v >= 0 && v < rows, IndexError,
                 "embedding: index {} is out of range for a table of {} rows (weight shape {})", v,
                 rows, shape_str(weight_shape));
      out[static_cast<std::size_t>(i)] = v;
    }
  };
  if (idx.dtype() == DType::Int64)
    check_copy.template operator()<std::int64_t>();
  else
    check_copy.template operator()<std::int32_t>();
  return out;
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices, std::int64_t padding_idx) {
  FSDP_DISPATCH("embedding", embedding, weight, indices, padding_idx);
  const char* op = "embedding";
  FSDP_CHECK(indices.dtype() == DType::Int64 || indices.dtype() == DType::Int32, TypeError,
             "embedding: expected indices of dtype int64 or int32, got {} (shape {})",
             dtype_name(indices.dtype()), shape_str(indices.shape()));
  FSDP_CHECK(weight.dim() == 2, ValueError,
             "embedding: weight must be 2-D (num_embeddings, embedding_dim), got shape {}",
             shape_str(weight.shape()));
  const std::int64_t rows = weight.size(0), dim = weight.size(1);
  FSDP_CHECK(padding_idx < rows, ValueError,
             "embedding: padding_idx ({}) must be within num_embeddings ({})", padding_idx, rows);
  Shape out_shape = indices.shape();
  out_shape.push_back(dim);
  if (functional::any_meta({&weight, &indices}, op))
    return functional::meta_empty(out_shape, weight.dtype());

  std::vector<std::int64_t> idx = checked_indices(indices, rows, weight.shape());
  Tensor w = functional::contiguous_as(weight, weight.dtype());
  Tensor out = empty(out_shape, TensorOptions(weight.dtype()));
  const std::size_t row_bytes = static_cast<std::size_t>(dim) * dtype_size(weight.dtype());
  const auto* src = static_cast<const char*>(w.data_ptr());
  auto* dst = static_cast<char*>(out.data_ptr());
  if (row_bytes > 0)
    for (std::size_t i = 0; i < idx.size(); ++i)
      std::memcpy(dst + i * row_bytes, src + static_cast<std::size_t>(idx[i]) * row_bytes,
                  row_bytes);

  const Shape w_shape = weight.shape();
  const DType w_dtype = weight.dtype();
  autograd::record("EmbeddingBackward", {weight, indices}, {out}, {indices},
                   [w_shape, w_dtype, padding_idx, rows](const autograd::variable_list& saved,
                                                         const autograd::variable_list& grads) {
                     autograd::variable_list result(2);
                     if (!grads[0].defined()) return result;
                     std::vector<std::int64_t> ix = checked_indices(saved[0], rows, w_shape);
                     const DType cd = functional::compute_dtype(w_dtype);
                     Tensor g = functional::contiguous_as(grads[0], cd);
                     Tensor gw = zeros(w_shape, TensorOptions(cd));
                     const std::int64_t d = w_shape[1];
                     dispatch_float(cd, "embedding", [&]<typename T>() {
                       const T* gp = g.data<T>();
                       T* wp = gw.data<T>();
                       for (std::size_t i = 0; i < ix.size(); ++i) {
                         if (ix[i] == padding_idx) continue;
                         T* row = wp + ix[i] * d;
                         const T* gr = gp + static_cast<std::int64_t>(i) * d;
                         for (std::int64_t j = 0; j < d; ++j) row[j] += gr[j];
                       }
                     });
                     result[0] = functional::to_result_dtype(gw, w_dtype);
                     return result;
                   });
  return out;
}

}  // namespace fsdp
