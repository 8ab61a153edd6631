// Tensor factories: empty, full, zeros, ones, scalar_tensor, arange, from_vector, *_like.
#include <cmath>

#include "core/dtype_convert.h"
#include "core/kernel_utils.h"
#include "core/ops.h"
#include "core/ops/op_utils.h"
#include "core/tensor.h"

namespace fsdp {

Tensor empty(const Shape& shape, TensorOptions o) {
  for (auto d : shape)
    FSDP_CHECK(d >= 0, ValueError, "empty: negative dimension in shape {}", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->set_sizes(shape);
  impl->strides = contiguous_strides(shape);
  impl->dtype = o.dtype;
  impl->device = o.device;
  impl->storage = std::make_shared<Storage>(
      static_cast<std::size_t>(shape_numel(shape)) * dtype_size(o.dtype), o.device);
  Tensor t(std::move(impl));
  if (o.requires_grad) t.requires_grad_(true);
  return t;
}

namespace {

// Factories that write their values from the host build them there and copy them to a device
// (through its copy kernel: device memory is not host memory).
bool on_device(const TensorOptions& o) {
  return !o.device.is_cpu() && !o.device.is_meta();
}
Tensor copied_to_device(const Tensor& host, const TensorOptions& o) {
  Tensor t = empty(host.shape(), o.with_requires_grad(false));
  t.copy_(host);
  if (o.requires_grad) t.requires_grad_(true);
  return t;
}

}  // namespace

Tensor full(const Shape& shape, double value, TensorOptions o) {
  bool rg = o.requires_grad;
  Tensor t = empty(shape, o.with_requires_grad(false));
  t.fill_(value);
  if (rg) t.requires_grad_(true);
  return t;
}
Tensor zeros(const Shape& shape, TensorOptions o) {
  return full(shape, 0.0, o);
}
Tensor ones(const Shape& shape, TensorOptions o) {
  return full(shape, 1.0, o);
}
Tensor scalar_tensor(double value, TensorOptions o) {
  return full({}, value, o);
}

Tensor arange(std::int64_t end, TensorOptions o) {
  return arange(0.0, static_cast<double>(end), 1.0, o);
}

Tensor arange(double start, double end, double step, TensorOptions o) {
  FSDP_CHECK(step != 0.0, ValueError, "arange: step must be nonzero");
  // torch's checks: a range the step cannot walk is refused, not made empty or unbounded.
  FSDP_CHECK(std::isfinite(step), RuntimeError, "arange: step must be finite but got {}", step);
  FSDP_CHECK(std::isfinite(start) && std::isfinite(end), RuntimeError,
             "arange: unsupported range: {} -> {}", start, end);
  FSDP_CHECK((step > 0 && end >= start) || (step < 0 && end <= start), RuntimeError,
             "arange: upper bound and lower bound inconsistent with step sign (start {}, end {}, "
             "step {})",
             start, end, step);
  auto n = static_cast<std::int64_t>(std::ceil((end - start) / step));
  n = std::max<std::int64_t>(n, 0);
  if (on_device(o))
    return copied_to_device(arange(start, end, step, o.with_device(kCPU)),
                            o.with_requires_grad(false));
  Tensor t = empty({n}, o.with_requires_grad(false));
  if (!t.is_meta()) {
    void* p = t.data_ptr();
    for (std::int64_t i = 0; i < n; ++i)
      store_double(p, o.dtype, i, start + step * static_cast<double>(i));
  }
  return t;
}

Tensor from_vector(const std::vector<double>& values, const Shape& shape, TensorOptions o) {
  FSDP_CHECK(static_cast<std::int64_t>(values.size()) == shape_numel(shape), ValueError,
             "from_vector: {} values do not fill shape {} ({} elements)", values.size(),
             shape_str(shape), shape_numel(shape));
  if (o.device.is_meta()) return empty(shape, o);  // shapes only
  if (on_device(o))
    return copied_to_device(
        from_vector(values, shape, o.with_device(kCPU).with_requires_grad(false)), o);
  Tensor t = empty(shape, o.with_requires_grad(false));
  void* p = t.data_ptr();
  for (std::size_t i = 0; i < values.size(); ++i)
    store_double(p, o.dtype, static_cast<std::int64_t>(i), values[i]);
  if (o.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor from_vector(const std::vector<std::int64_t>& values, const Shape& shape, TensorOptions o) {
  FSDP_CHECK(static_cast<std::int64_t>(values.size()) == shape_numel(shape), ValueError,
             "from_vector: {} values do not fill shape {} ({} elements)", values.size(),
             shape_str(shape), shape_numel(shape));
  if (o.device.is_meta()) return empty(shape, o);  // shapes only
  if (on_device(o))
    return copied_to_device(
        from_vector(values, shape, o.with_device(kCPU).with_requires_grad(false)), o);
  Tensor t = empty(shape, o.with_requires_grad(false));
  void* p = t.data_ptr();
  dispatch_all(o.dtype, [&]<typename T>() {
    T* tp = static_cast<T*>(p);
    for (std::size_t i = 0; i < values.size(); ++i) {
      if constexpr (std::is_integral_v<T>)
        tp[i] = static_cast<T>(values[i]);
      else
        tp[i] = from_double<T>(static_cast<double>(values[i]));
    }
  });
  if (o.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor empty_like(const Tensor& t) {
  return empty(t.shape(), TensorOptions(t.dtype(), t.device()));
}
Tensor zeros_like(const Tensor& t) {
  return zeros(t.shape(), TensorOptions(t.dtype(), t.device()));
}
Tensor ones_like(const Tensor& t) {
  return ones(t.shape(), TensorOptions(t.dtype(), t.device()));
}

}  // namespace fsdp
