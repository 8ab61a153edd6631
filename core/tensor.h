// Tensor: a strided view of a Storage with a dtype, a device and autograd metadata.
// Copying a Tensor copies a handle (like a Python reference); is_same() compares identity.
// Ops (core/ops.h) are free functions; the methods below are conveniences that call them.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/memory.h"

namespace fsdp {

using Shape = std::vector<std::int64_t>;

std::string shape_str(const Shape& shape);  // "[2, 3]"
std::int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);

class Tensor;
namespace autograd {
class Node;
struct AutogradMeta;
}  // namespace autograd

struct TensorImpl {
 private:
  std::int64_t numel_ = 1;  // first: beside the control block on the object's first cache line
  Shape sizes_;

 public:
  std::shared_ptr<Storage> storage;
  // The shape, with its element count kept beside it: numel is asked for every parameter of every
  // module by the wrapping traversals, and reading it must not chase the shape's heap array.
  const Shape& sizes() const { return sizes_; }
  std::int64_t numel() const { return numel_; }
  void set_sizes(Shape sizes) {
    numel_ = shape_numel(sizes);
    sizes_ = std::move(sizes);
  }
  Shape strides;
  std::int64_t offset = 0;  // in elements
  DType dtype = DType::Float32;
  Device device;
  std::unique_ptr<autograd::AutogradMeta> autograd;  // null until autograd touches the tensor

  TensorImpl();
  ~TensorImpl();
  autograd::AutogradMeta& autograd_meta();  // creates on first use
};

// Removes a hook when remove() is called (hooks stay registered if the handle is dropped).
class HookHandle {
 public:
  HookHandle() = default;
  explicit HookHandle(std::shared_ptr<bool> alive) : alive_(std::move(alive)) {}
  void remove() {
    if (alive_) *alive_ = false;
  }

 private:
  std::shared_ptr<bool> alive_;
};

struct TensorOptions {
  DType dtype = DType::Float32;
  Device device;
  bool requires_grad = false;
  TensorOptions() = default;
  TensorOptions(DType d) : dtype(d) {}  // NOLINT: implicit on purpose, empty(shape, DType::Int64)
  TensorOptions(DType d, Device dev, bool rg = false) : dtype(d), device(dev), requires_grad(rg) {}
  TensorOptions with_dtype(DType d) const {
    auto o = *this;
    o.dtype = d;
    return o;
  }
  TensorOptions with_device(Device d) const {
    auto o = *this;
    o.device = d;
    return o;
  }
  TensorOptions with_requires_grad(bool r) const {
    auto o = *this;
    o.requires_grad = r;
    return o;
  }
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // --- metadata
  const Shape& shape() const { return check().sizes(); }
  const Shape& sizes() const { return check().sizes(); }
  const Shape& strides() const { return check().strides; }
  std::int64_t size(std::int64_t dim) const;  // negative dims count from the end
  std::int64_t stride(std::int64_t dim) const;
  std::int64_t dim() const { return static_cast<std::int64_t>(check().sizes().size()); }
  std::int64_t numel() const { return check().numel(); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype()); }
  DType dtype() const { return check().dtype; }
  Device device() const { return check().device; }
  bool is_meta() const { return device().is_meta(); }
  bool is_floating_point() const { return is_floating(dtype()); }
  bool is_contiguous() const;
  std::int64_t storage_offset() const { return check().offset; }
  const std::shared_ptr<Storage>& storage() const { return check().storage; }

  // --- data (cpu): pointer to the first element of this view
  void* data_ptr() const;
  template <typename T>
  T* data() const {
    return static_cast<T*>(data_ptr());
  }
  double item() const;                    // one-element tensor, any dtype
  std::vector<double> to_vector() const;  // all elements in row-major order, as double
  std::vector<std::int64_t> to_int_vector() const;

  // --- views and copies (differentiable)
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor flatten(std::int64_t start_dim = 0, std::int64_t end_dim = -1) const;
  Tensor transpose(std::int64_t d0, std::int64_t d1) const;
  Tensor t() const;  // 2-D transpose
  Tensor permute(const Shape& dims) const;
  Tensor unsqueeze(std::int64_t dim) const;
  Tensor squeeze(std::int64_t dim) const;
  Tensor expand(const Shape& shape) const;
  Tensor narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const;
  Tensor select(std::int64_t dim, std::int64_t index) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor detach() const;  // shares storage, no autograd history
  // Python's `param.data = other`: this tensor object (its identity, autograd metadata, hooks)
  // now views other's storage, shape, strides, dtype and device. Not recorded by autograd.
  void set_data(const Tensor& other) const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;

  // --- in-place (not recorded by autograd unless stated; bump the version counter)
  Tensor& copy_(const Tensor& src);  // broadcasting, converting copy
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }

  // --- reductions and arithmetic conveniences
  Tensor sum() const;
  Tensor mean() const;

  // --- autograd
  bool requires_grad() const;
  Tensor& requires_grad_(bool requires_grad = true);  // leaves only
  bool is_leaf() const;
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  std::uint32_t output_nr() const;
  // Backward from this tensor. A non-scalar needs `gradient`.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  // Hook on this tensor's gradient; may return a replacement (an undefined Tensor keeps it).
  HookHandle register_hook(std::function<Tensor(const Tensor&)> hook) const;
  // Leaf only: runs after the gradient was accumulated into .grad (FSDP's post-backward hook).
  HookHandle register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;
  void retain_grad() const;

  std::string str() const;  // "tensor([2, 3], float32, cpu)" plus values when small

 private:
  const TensorImpl& check() const;
  std::shared_ptr<TensorImpl> impl_;
};

// --- factories
Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
Tensor arange(std::int64_t end, TensorOptions options = DType::Int64);
Tensor arange(double start, double end, double step = 1.0, TensorOptions options = DType::Int64);
Tensor scalar_tensor(double value, TensorOptions options = {});
// From values in row-major order, converted to options.dtype.
Tensor from_vector(const std::vector<double>& values, const Shape& shape,
                   TensorOptions options = {});
inline Tensor from_vector(std::initializer_list<double> values, const Shape& shape,
                          TensorOptions options = {}) {
  return from_vector(std::vector<double>(values), shape, options);
}
Tensor from_vector(const std::vector<std::int64_t>& values, const Shape& shape,
                   TensorOptions options = DType::Int64);
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
// Throws RuntimeError naming `op` when `t` is a cpu tensor whose storage no longer holds the
// bytes its view needs (freed with Storage::resize(0), e.g. a resharded FSDP parameter).
void check_storage_alive(const Tensor& t, const char* op);
// Throws RuntimeError naming `op` when `t`, about to be written in place, has several elements
// at one memory location (a stride-0 dim of size > 1, as an expanded tensor): torch's
// has_internal_overlap refusal, since each element's result would overwrite the others.
void check_no_internal_overlap(const Tensor& t, const char* op);

// Copies src into dst (same shape, any strides, converting dtypes, within a device or between
// the host and a device) without recording autograd and without bumping dst's version counter:
// for refilling a buffer that saved tensors still view (FSDP's unsharded parameters between
// forward and backward), where the values are, by construction, the ones saved.
void copy_unversioned(const Tensor& dst, const Tensor& src);
// copy_unversioned from a device into host memory, queued on the current stream of src's device
// without waiting when dst's storage is pinned (Storage::pinned) and the device copies into pinned
// memory asynchronously (CUDA): the host reads dst only after waiting for an event recorded after
// this (torch's non_blocking=True). Otherwise, or with other dtypes or layouts, copy_unversioned.
void copy_unversioned_non_blocking(const Tensor& dst, const Tensor& src);

// A tensor over existing storage.
Tensor make_view(const Tensor& base, const Shape& sizes, const Shape& strides, std::int64_t offset);

}  // namespace fsdp
