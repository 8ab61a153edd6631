// View ops (share storage, record autograd), copies (contiguous, clone) and dtype/device moves.
#include <algorithm>
#include <optional>

#include "core/dispatch/intercept.h"
#include "core/ops/op_utils.h"

namespace fsdp {
using namespace ops_detail;

namespace {

// Resolves one -1 in `shape` against `numel`.
Shape infer_size(const Shape& shape, std::int64_t numel, const char* op) {
  Shape out = shape;
  std::int64_t known = 1;
  int infer_at = -1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      FSDP_CHECK(infer_at < 0, RuntimeError, "{}: only one dimension can be inferred (shape {})",
                 op, shape_str(shape));
      infer_at = static_cast<int>(i);
    } else {
      FSDP_CHECK(shape[i] >= 0, RuntimeError, "{}: invalid shape dimension {} in shape {}", op,
                 shape[i], shape_str(shape));
      known *= shape[i];
    }
  }
  if (infer_at >= 0) {
    FSDP_CHECK(known != 0 && numel % known == 0, RuntimeError,
               "{}: shape '{}' is invalid for input of size {}", op, shape_str(shape), numel);
    out[static_cast<std::size_t>(infer_at)] = numel / known;
  } else {
    FSDP_CHECK(known == numel, RuntimeError, "{}: shape '{}' is invalid for input of size {}", op,
               shape_str(shape), numel);
  }
  return out;
}

// Strides that let `new_sizes` view memory laid out as (sizes, strides), if any exist: each run
// of old dims that is contiguous among itself must map onto whole new dims.
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides,
                                  const Shape& new_sizes) {
  if (sizes.empty() || shape_numel(sizes) == 0) return contiguous_strides(new_sizes);
  Shape out(new_sizes.size(), 1);
  auto view_d = static_cast<std::int64_t>(new_sizes.size()) - 1;
  std::int64_t base = strides.back(), tensor_numel = 1, view_numel = 1;
  for (auto d = static_cast<std::int64_t>(sizes.size()) - 1; d >= 0; --d) {
    auto ud = static_cast<std::size_t>(d);
    tensor_numel *= sizes[ud];
    bool chunk_ends = d == 0 || (sizes[ud - 1] != 1 && strides[ud - 1] != tensor_numel * base);
    if (!chunk_ends) continue;
    while (view_d >= 0 &&
           (view_numel < tensor_numel || new_sizes[static_cast<std::size_t>(view_d)] == 1)) {
      out[static_cast<std::size_t>(view_d)] = view_numel * base;
      view_numel *= new_sizes[static_cast<std::size_t>(view_d)];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      base = strides[ud - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

// Records a view's backward: fn maps the view's gradient to the base's shape.
template <typename F>
void record_view(const char* name, const Tensor& a, const Tensor& out, F fn) {
  autograd::record(
      name, {a}, {out}, {},
      [fn](const variable_list&, const variable_list& g) -> variable_list { return {fn(g[0])}; });
}

}  // namespace

void ops_detail::copy_strided(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  kernels(dst.device()).copy(dst, src);
}

Tensor view(const Tensor& a, const Shape& shape) {
  FSDP_DISPATCH("view", view, a, shape);
  common_device("view", {&a});
  Shape sizes = infer_size(shape, a.numel(), "view");
  auto st = view_strides(a.shape(), a.strides(), sizes);
  FSDP_CHECK(st.has_value(), RuntimeError,
             "view size is not compatible with input tensor's size and stride (at least one "
             "dimension spans across two contiguous subspaces). Use .reshape(...) instead. "
             "(view of a tensor of shape {} and strides {} as {})",
             shape_str(a.shape()), shape_str(a.strides()), shape_str(shape));
  Tensor out = make_view(a, sizes, *st, a.storage_offset());
  record_view("ViewBackward0", a, out, [s = a.shape()](const Tensor& g) { return reshape(g, s); });
  return out;
}

Tensor reshape(const Tensor& a, const Shape& shape) {
  FSDP_DISPATCH("reshape", reshape, a, shape);
  common_device("reshape", {&a});
  Shape sizes = infer_size(shape, a.numel(), "reshape");
  if (view_strides(a.shape(), a.strides(), sizes)) return view(a, sizes);
  return view(clone(a), sizes);
}

Tensor transpose(const Tensor& a, std::int64_t d0, std::int64_t d1) {
  FSDP_DISPATCH("transpose", transpose, a, d0, d1);
  common_device("transpose", {&a});
  const std::int64_t nd = a.dim();
  auto i0 = static_cast<std::size_t>(wrap_dim(d0, nd, "transpose"));
  auto i1 = static_cast<std::size_t>(wrap_dim(d1, nd, "transpose"));
  Shape sizes = a.shape(), strides = a.strides();
  if (nd > 0) {
    std::swap(sizes[i0], sizes[i1]);
    std::swap(strides[i0], strides[i1]);
  }
  Tensor out = make_view(a, sizes, strides, a.storage_offset());
  record_view("TransposeBackward0", a, out,
              [d0, d1](const Tensor& g) { return transpose(g, d0, d1); });
  return out;
}

Tensor permute(const Tensor& a, const Shape& dims) {
  FSDP_DISPATCH("permute", permute, a, dims);
  common_device("permute", {&a});
  const std::int64_t nd = a.dim();
  FSDP_CHECK(static_cast<std::int64_t>(dims.size()) == nd, RuntimeError,
             "permute(sparse_coo): number of dimensions in the tensor input does not match the "
             "length of the desired ordering of dimensions i.e. input.dim() = {} is not equal to "
             "len(dims) = {} (tensor shape {}, dims {})",
             nd, dims.size(), shape_str(a.shape()), shape_str(dims));
  Shape sizes(dims.size()), strides(dims.size()), inverse(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    auto d = static_cast<std::size_t>(wrap_dim(dims[i], nd, "permute"));
    FSDP_CHECK(!seen[d], RuntimeError, "permute: repeated dim {} in dims {}", d, shape_str(dims));
    seen[d] = true;
    sizes[i] = a.shape()[d];
    strides[i] = a.strides()[d];
    inverse[d] = static_cast<std::int64_t>(i);
  }
  Tensor out = make_view(a, sizes, strides, a.storage_offset());
  record_view("PermuteBackward0", a, out,
              [inverse](const Tensor& g) { return permute(g, inverse); });
  return out;
}

Tensor unsqueeze(const Tensor& a, std::int64_t dim) {
  FSDP_DISPATCH("unsqueeze", unsqueeze, a, dim);
  common_device("unsqueeze", {&a});
  auto d = static_cast<std::size_t>(wrap_insert_dim(dim, a.dim(), "unsqueeze"));
  Shape sizes = a.shape(), strides = a.strides();
  std::int64_t st = d < sizes.size() ? sizes[d] * strides[d] : 1;
  sizes.insert(sizes.begin() + static_cast<std::ptrdiff_t>(d), 1);
  strides.insert(strides.begin() + static_cast<std::ptrdiff_t>(d), st);
  Tensor out = make_view(a, sizes, strides, a.storage_offset());
  record_view("UnsqueezeBackward0", a, out,
              [d](const Tensor& g) { return squeeze(g, static_cast<std::int64_t>(d)); });
  return out;
}

Tensor squeeze(const Tensor& a, std::int64_t dim) {
  FSDP_DISPATCH("squeeze", squeeze, a, dim);
  common_device("squeeze", {&a});
  auto d = static_cast<std::size_t>(wrap_dim(dim, a.dim(), "squeeze"));
  Shape sizes = a.shape(), strides = a.strides();
  bool drop = !sizes.empty() && sizes[d] == 1;
  if (drop) {
    sizes.erase(sizes.begin() + static_cast<std::ptrdiff_t>(d));
    strides.erase(strides.begin() + static_cast<std::ptrdiff_t>(d));
  }
  Tensor out = make_view(a, sizes, strides, a.storage_offset());
  record_view("SqueezeBackward1", a, out,
              [s = a.shape()](const Tensor& g) { return reshape(g, s); });
  return out;
}

Tensor expand(const Tensor& a, const Shape& shape) {
  FSDP_DISPATCH("expand", expand, a, shape);
  common_device("expand", {&a});
  const auto& as = a.shape();
  FSDP_CHECK(shape.size() >= as.size(), RuntimeError,
             "expand: the number of sizes provided ({}) must be greater or equal to the number "
             "of dimensions in the tensor ({}) (target {}, tensor {})",
             shape.size(), as.size(), shape_str(shape), shape_str(as));
  const std::size_t lead = shape.size() - as.size();
  Shape sizes(shape.size()), strides(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      FSDP_CHECK(shape[i] >= 0, RuntimeError,
                 "expand: the expanded size of the tensor (-1) isn't allowed in a leading, "
                 "non-existing dimension {} (target {}, tensor {})",
                 i, shape_str(shape), shape_str(as));
      sizes[i] = shape[i];
      strides[i] = 0;
      continue;
    }
    std::int64_t cur = as[i - lead], want = shape[i] == -1 ? cur : shape[i];
    FSDP_CHECK(cur == want || cur == 1, RuntimeError,
               "expand: the expanded size of the tensor ({}) must match the existing size ({}) "
               "at non-singleton dimension {}.  Target sizes: {}.  Tensor sizes: {}",
               want, cur, i, shape_str(shape), shape_str(as));
    sizes[i] = want;
    strides[i] = cur == want ? a.strides()[i - lead] : 0;
  }
  Tensor out = make_view(a, sizes, strides, a.storage_offset());
  record_view("ExpandBackward0", a, out, [s = as](const Tensor& g) { return sum_to(g, s); });
  return out;
}

Tensor flatten(const Tensor& a, std::int64_t start_dim, std::int64_t end_dim) {
  FSDP_DISPATCH("flatten", flatten, a, start_dim, end_dim);
  common_device("flatten", {&a});
  if (a.dim() == 0) return reshape(a, {1});
  auto s = wrap_dim(start_dim, a.dim(), "flatten"), e = wrap_dim(end_dim, a.dim(), "flatten");
  FSDP_CHECK(s <= e, RuntimeError,
             "flatten() has invalid args: start_dim ({}) cannot come after "
             "end_dim ({}) (tensor shape {})",
             start_dim, end_dim, shape_str(a.shape()));
  if (s == e) return a;
  Shape sizes;
  std::int64_t n = 1;
  for (std::int64_t i = 0; i < a.dim(); ++i) {
    if (i < s || i > e)
      sizes.push_back(a.shape()[static_cast<std::size_t>(i)]);
    else
      n *= a.shape()[static_cast<std::size_t>(i)];
    if (i == e) sizes.push_back(n);
  }
  return reshape(a, sizes);
}

Tensor narrow(const Tensor& a, std::int64_t dim, std::int64_t start, std::int64_t length) {
  FSDP_DISPATCH("narrow", narrow, a, dim, start, length);
  common_device("narrow", {&a});
  FSDP_CHECK(a.dim() > 0, RuntimeError, "narrow() cannot be applied to a 0-dim tensor.");
  auto d = static_cast<std::size_t>(wrap_dim(dim, a.dim(), "narrow"));
  const std::int64_t size = a.shape()[d];
  FSDP_CHECK(start >= -size && start <= size, IndexError,
             "narrow: start ({}) out of range for dimension {} of size {} (tensor shape {})", start,
             d, size, shape_str(a.shape()));
  if (start < 0) start += size;
  FSDP_CHECK(length >= 0 && start + length <= size, RuntimeError,
             "narrow: start ({}) + length ({}) exceeds dimension size ({}) (dimension {}, tensor "
             "shape {})",
             start, length, size, d, shape_str(a.shape()));
  Shape sizes = a.shape();
  sizes[d] = length;
  Tensor out = make_view(a, sizes, a.strides(), a.storage_offset() + start * a.strides()[d]);
  record_view("NarrowBackward0", a, out, [s = a.shape(), d, start, length](const Tensor& g) {
    Tensor full_grad = zeros(s, TensorOptions(g.dtype(), g.device()));
    Tensor part = narrow(full_grad, static_cast<std::int64_t>(d), start, length);
    part.copy_(g);
    return full_grad;
  });
  return out;
}

Tensor select(const Tensor& a, std::int64_t dim, std::int64_t index) {
  FSDP_DISPATCH("select", select, a, dim, index);
  common_device("select", {&a});
  FSDP_CHECK(a.dim() > 0, IndexError, "select() cannot be applied to a 0-dim tensor.");
  auto d = static_cast<std::size_t>(wrap_dim(dim, a.dim(), "select"));
  const std::int64_t size = a.shape()[d];
  FSDP_CHECK(index >= -size && index < size, IndexError,
             "select(): index {} out of range for tensor of size {} at dimension {}", index,
             shape_str(a.shape()), d);
  if (index < 0) index += size;
  Shape sizes = a.shape(), strides = a.strides();
  std::int64_t offset = a.storage_offset() + index * strides[d];
  sizes.erase(sizes.begin() + static_cast<std::ptrdiff_t>(d));
  strides.erase(strides.begin() + static_cast<std::ptrdiff_t>(d));
  Tensor out = make_view(a, sizes, strides, offset);
  record_view("SelectBackward0", a, out, [s = a.shape(), d, index](const Tensor& g) {
    Tensor full_grad = zeros(s, TensorOptions(g.dtype(), g.device()));
    select(full_grad, static_cast<std::int64_t>(d), index).copy_(g);
    return full_grad;
  });
  return out;
}

Tensor contiguous(const Tensor& a) {
  FSDP_DISPATCH("contiguous", contiguous, a);
  common_device("contiguous", {&a});
  if (a.is_contiguous()) return a;
  return clone(a);
}

Tensor clone(const Tensor& a) {
  FSDP_DISPATCH("clone", clone, a);
  const Device dev = common_device("clone", {&a});
  Tensor out = new_tensor(a.shape(), a.dtype(), dev);
  if (!dev.is_meta()) copy_strided(out, a);
  record_view("CloneBackward0", a, out, [](const Tensor& g) { return g; });
  return out;
}

Tensor to_dtype(const Tensor& a, DType dtype) {
  FSDP_DISPATCH("to_dtype", to_dtype, a, dtype);
  const Device dev = common_device("to_dtype", {&a});
  if (a.dtype() == dtype) return a;
  Tensor out = new_tensor(a.shape(), dtype, dev);
  if (!dev.is_meta()) copy_strided(out, a);
  if (is_floating(dtype))
    record_view("ToCopyBackward0", a, out,
                [src = a.dtype()](const Tensor& g) { return to_dtype(g, src); });
  return out;
}

Tensor to_device(const Tensor& a, Device device) {
  FSDP_DISPATCH("to_device", to_device, a, device);
  common_device("to_device", {&a});
  FSDP_CHECK(device.is_meta() || has_kernels(device), NotImplementedError,
             "to_device: moving a tensor (shape {}) to {} is not implemented: this build has no "
             "kernels for that device",
             shape_str(a.shape()), device.str());
  if (a.device() == device) return a;
  FSDP_CHECK(!a.is_meta(), NotImplementedError,
             "Cannot copy out of meta tensor; no data! (to_device {} for a meta tensor of shape "
             "{}; materialize with empty(...) and initialise instead)",
             device.str(), shape_str(a.shape()));
  Tensor out = new_tensor(a.shape(), a.dtype(), device);
  // Across devices through the device's copy (Tensor::copy_); to meta, shapes only.
  if (!device.is_meta()) out.copy_(a);
  record_view("ToCopyBackward0", a, out,
              [src = a.device()](const Tensor& g) { return to_device(g, src); });
  return out;
}

}  // namespace fsdp
