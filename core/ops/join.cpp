// Joining and splitting along a dim (cat, stack, split, split_with_sizes, chunk) and
// index_select.
#include "core/dispatch/intercept.h"
#include "core/ops/op_utils.h"

namespace fsdp {
using namespace ops_detail;

namespace {

// PyTorch skips 1-D empty tensors in cat whatever the other shapes are (legacy behaviour).
bool skipped_in_cat(const Tensor& t) {
  return t.dim() == 1 && t.size(0) == 0;
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim) {
  FSDP_DISPATCH("cat", cat, tensors, dim);
  FSDP_CHECK(!tensors.empty(), RuntimeError, "cat(): expected a non-empty list of Tensors");
  const Device dev = common_device("cat", tensors);
  const bool meta = dev.is_meta();
  const Tensor* ref = &tensors[0];
  for (const auto& t : tensors)
    if (!skipped_in_cat(t)) {
      ref = &t;
      break;
    }
  FSDP_CHECK(ref->dim() > 0, RuntimeError,
             "cat(): zero-dimensional tensor (at position 0) cannot be concatenated");
  const auto d = static_cast<std::size_t>(wrap_dim(dim, ref->dim(), "cat"));
  Shape shape = ref->shape();
  shape[d] = 0;
  DType dt = tensors[0].dtype();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    dt = promote_types(dt, t.dtype());
    if (skipped_in_cat(t)) continue;
    FSDP_CHECK(t.dim() == ref->dim(), RuntimeError,
               "cat(): tensors must have same number of dimensions: got {} and {} (shapes {} and "
               "{} at position {})",
               ref->dim(), t.dim(), shape_str(ref->shape()), shape_str(t.shape()), i);
    for (std::size_t k = 0; k < shape.size(); ++k)
      FSDP_CHECK(k == d || t.shape()[k] == ref->shape()[k], RuntimeError,
                 "cat(): Sizes of tensors must match except in dimension {}. Expected size {} but "
                 "got size {} for tensor number {} in the list (shapes {} and {})",
                 d, ref->shape()[k], t.shape()[k], i, shape_str(ref->shape()),
                 shape_str(t.shape()));
    shape[d] += t.shape()[d];
  }
  Tensor out = new_tensor(shape, dt, dev);
  std::vector<std::int64_t> starts;
  std::int64_t at = 0;
  for (const auto& t : tensors) {
    starts.push_back(at);
    if (skipped_in_cat(t)) continue;
    const std::int64_t len = t.shape()[d];
    if (!meta && len > 0) {
      Shape st = out.strides();
      Tensor part = make_view(out, t.shape(), st, out.storage_offset() + at * st[d]);
      copy_strided(part, t);
    }
    at += len;
  }
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (const auto& t : tensors) {
    shapes.push_back(t.shape());
    dtypes.push_back(t.dtype());
  }
  autograd::record(
      "CatBackward0", tensors, {out}, {},
      [shapes, dtypes, starts, d](const variable_list&, const variable_list& g) -> variable_list {
        variable_list grads;
        for (std::size_t i = 0; i < shapes.size(); ++i) {
          if (!is_floating(dtypes[i])) {
            grads.emplace_back();
          } else if (shapes[i].size() == 1 && shapes[i][0] == 0) {
            grads.push_back(zeros(shapes[i], TensorOptions(dtypes[i], g[0].device())));
          } else {
            Tensor gi = narrow(g[0], static_cast<std::int64_t>(d), starts[i], shapes[i][d]);
            grads.push_back(reduce_grad(gi, shapes[i], dtypes[i]));
          }
        }
        return grads;
      });
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim) {
  FSDP_DISPATCH("stack", stack, tensors, dim);
  FSDP_CHECK(!tensors.empty(), RuntimeError, "stack expects a non-empty TensorList");
  const auto d = wrap_insert_dim(dim, tensors[0].dim(), "stack");
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    FSDP_CHECK(tensors[i].shape() == tensors[0].shape(), RuntimeError,
               "stack expects each tensor to be equal size, but got {} at entry 0 and {} at "
               "entry {}",
               shape_str(tensors[0].shape()), shape_str(tensors[i].shape()), i);
    parts.push_back(unsqueeze(tensors[i], d));
  }
  return cat(parts, d);
}

std::vector<Tensor> split(const Tensor& a, std::int64_t split_size, std::int64_t dim) {
  FSDP_DISPATCH("split", split, a, split_size, dim);
  FSDP_CHECK(a.dim() > 0, RuntimeError, "split expects at least a 1-dimensional tensor");
  const auto d = wrap_dim(dim, a.dim(), "split");
  const std::int64_t size = a.size(d);
  FSDP_CHECK(split_size > 0 || (split_size == 0 && size == 0), RuntimeError,
             "split expects split_size be non-negative, but got split_size={} (dimension {} of "
             "size {})",
             split_size, d, size);
  std::vector<Tensor> out;
  if (size == 0 || split_size == 0) {
    out.push_back(narrow(a, d, 0, 0));
    return out;
  }
  for (std::int64_t s = 0; s < size; s += split_size)
    out.push_back(narrow(a, d, s, std::min(split_size, size - s)));
  return out;
}

std::vector<Tensor> split_with_sizes(const Tensor& a, const std::vector<std::int64_t>& sizes,
                                     std::int64_t dim) {
  FSDP_DISPATCH("split_with_sizes", split_with_sizes, a, sizes, dim);
  FSDP_CHECK(a.dim() > 0, RuntimeError, "split_with_sizes expects at least a 1-dimensional tensor");
  const auto d = wrap_dim(dim, a.dim(), "split_with_sizes");
  std::int64_t total = 0;
  for (auto s : sizes) {
    FSDP_CHECK(s >= 0, RuntimeError,
               "split_with_sizes expects split_sizes have only non-negative entries, but got "
               "split_sizes={}",
               shape_str(sizes));
    total += s;
  }
  FSDP_CHECK(total == a.size(d), RuntimeError,
             "split_with_sizes expects split_sizes to sum exactly to {} (input tensor's size at "
             "dimension {}), but got split_sizes={}",
             a.size(d), d, shape_str(sizes));
  std::vector<Tensor> out;
  std::int64_t at = 0;
  for (auto s : sizes) {
    out.push_back(narrow(a, d, at, s));
    at += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& a, std::int64_t chunks, std::int64_t dim) {
  FSDP_DISPATCH("chunk", chunk, a, chunks, dim);
  FSDP_CHECK(a.dim() > 0, RuntimeError, "chunk expects at least a 1-dimensional tensor");
  FSDP_CHECK(chunks > 0, RuntimeError, "chunk expects `chunks` to be greater than 0, got: {}",
             chunks);
  const auto d = wrap_dim(dim, a.dim(), "chunk");
  const std::int64_t size = a.size(d);
  const std::int64_t split_size = (size + chunks - 1) / chunks;
  if (split_size == 0 && size == 0) {
    // Every chunk of an empty dim is empty; PyTorch returns `chunks` of them.
    std::vector<Tensor> out;
    for (std::int64_t i = 0; i < chunks; ++i) out.push_back(narrow(a, d, 0, 0));
    return out;
  }
  return split(a, split_size, d);
}

Tensor index_select(const Tensor& a, std::int64_t dim, const Tensor& index) {
  FSDP_DISPATCH("index_select", index_select, a, dim, index);
  const Device dev = common_device("index_select", {&a, &index});
  const bool meta = dev.is_meta();
  FSDP_CHECK(index.dtype() == DType::Int64 || index.dtype() == DType::Int32, TypeError,
             "index_select(): Expected dtype int32/int64 for index, got {}",
             dtype_name(index.dtype()));
  FSDP_CHECK(index.dim() <= 1, IndexError,
             "index_select(): Index is supposed to be a vector, got shape {}",
             shape_str(index.shape()));
  const auto d = static_cast<std::size_t>(wrap_dim(dim, a.dim(), "index_select"));
  const std::int64_t n = index.numel();
  // A 0-d tensor gives a 0-d result, so it takes exactly one index (torch's rule).
  FSDP_CHECK(a.dim() > 0 || n == 1, IndexError,
             "index_select(): Index to scalar can have only 1 value, got {} value(s)", n);
  Shape shape = a.shape();
  if (!shape.empty()) shape[d] = n;
  Tensor out = new_tensor(shape, a.dtype(), dev);
  const Shape ashape = a.dim() == 0 ? Shape{1} : a.shape();
  std::int64_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < ashape.size(); ++i) {
    if (i < d) outer *= ashape[i];
    if (i > d) inner *= ashape[i];
  }
  // The kernel checks the indices (no host read of a device's index): torch refuses a negative one.
  const IndexBounds bounds = index_select_bounds(ashape[d], static_cast<std::int64_t>(d));
  Tensor idx;
  if (!meta) {
    idx = kernel_index(index, dev).reshape({n});
    kernels(dev).index_select(out, contiguous(a.detach()), idx, bounds, outer, inner);
  }
  autograd::record(
      "IndexSelectBackward0", {a}, {out}, {},
      [s = a.shape(), idx, outer, inner, bounds](const variable_list&,
                                                 const variable_list& g) -> variable_list {
        // index_add of the gradient rows into zeros.
        Tensor grad = zeros(s, TensorOptions(g[0].dtype(), g[0].device()));
        if (grad.is_meta()) return {grad};
        kernels(grad.device()).index_add(grad, contiguous(g[0]), idx, bounds, outer, inner);
        return {grad};
      });
  return out;
}

}  // namespace fsdp
