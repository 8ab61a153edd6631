#include "core/tensor.h"

#include <cmath>
#include <sstream>

#include "core/autograd.h"
#include "core/device_copy.h"
#include "core/dtype_convert.h"
#include "core/kernel_utils.h"
#include "core/kernels/kernel_table.h"
#include "core/ops.h"
#include "core/ops/op_utils.h"
#include "core/random.h"
#include "core/wrap_dim.h"

namespace fsdp {

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  // A shape past int64 (a config's vocab_size * hidden_size on meta) is refused, as torch does,
  // never wrapped into a wrong or zero count.
  for (auto d : shape) {
    const bool overflow = __builtin_mul_overflow(n, d, &n);
    FSDP_CHECK(!overflow, RuntimeError, "Storage size calculation overflowed with sizes={}",
               shape_str(shape));
  }
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  std::int64_t s = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    st[i] = s;
    s *= std::max<std::int64_t>(shape[i], 1);
  }
  return st;
}

TensorImpl::TensorImpl() = default;
TensorImpl::~TensorImpl() = default;

autograd::AutogradMeta& TensorImpl::autograd_meta() {
  if (!autograd) autograd = std::make_unique<autograd::AutogradMeta>();
  return *autograd;
}

const TensorImpl& Tensor::check() const {
  if (!impl_) throw RuntimeError("operation on an undefined tensor");
  return *impl_;
}

// A 0-d tensor has no size or stride to index (torch: "Dimension specified as 0 but tensor has
// no dimensions"); otherwise dims wrap as everywhere (core/wrap_dim.h).
static std::size_t accessor_dim(std::int64_t dim, std::int64_t ndim, const char* what) {
  FSDP_CHECK(ndim > 0, IndexError, "{}: Dimension specified as {} but tensor has no dimensions",
             what, dim);
  return static_cast<std::size_t>(wrap_dim(dim, ndim, what));
}

std::int64_t Tensor::size(std::int64_t dim) const {
  return sizes()[accessor_dim(dim, this->dim(), "size")];
}
std::int64_t Tensor::stride(std::int64_t dim) const {
  return strides()[accessor_dim(dim, this->dim(), "stride")];
}

bool Tensor::is_contiguous() const {
  const auto& t = check();
  std::int64_t expected = 1;
  for (std::size_t i = t.sizes().size(); i-- > 0;) {
    if (t.sizes()[i] == 1) continue;
    if (t.strides[i] != expected) return false;
    expected *= t.sizes()[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  const auto& t = check();
  FSDP_CHECK(!t.device.is_meta(), RuntimeError,
             "cannot access the data of a meta tensor (shape {}, {}): meta tensors have no storage",
             shape_str(t.sizes()), dtype_name(t.dtype));
  if (!t.storage || !t.storage->data()) {
    if (t.numel() > 0) check_storage_alive(*this, "data_ptr");
    return nullptr;
  }
  return static_cast<char*>(t.storage->data()) +
         t.offset * static_cast<std::int64_t>(dtype_size(t.dtype));
}

namespace {

// A tensor whose values live on a device other than the host (not cpu, not meta).
bool is_accelerator_tensor(const Tensor& t) {
  return !t.device().is_cpu() && !t.device().is_meta();
}

// The values of t in a fresh host tensor, copied through its device's copy kernel (no autograd,
// no dispatch mode: item(), to_vector() and printing read through it).
Tensor host_copy(const Tensor& t) {
  Tensor host = empty(t.shape(), TensorOptions(t.dtype(), kCPU));
  host.copy_(t);
  return host;
}

}  // namespace

double Tensor::item() const {
  FSDP_CHECK(numel() == 1, ValueError,
             "item(): only a one-element tensor can be converted to a scalar (got shape {})",
             shape_str(shape()));
  if (is_accelerator_tensor(*this)) return host_copy(*this).item();
  check_cpu(*this, "item");
  return load_double(data_ptr(), dtype(), 0);
}

std::vector<double> Tensor::to_vector() const {
  if (is_accelerator_tensor(*this)) return host_copy(*this).to_vector();
  check_cpu(*this, "to_vector");
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(numel()));
  const void* p = data_ptr();
  DType dt = dtype();
  for_each_offset(shape(), strides(),
                  [&](std::int64_t o) { out.push_back(load_double(p, dt, o)); });
  return out;
}

std::vector<std::int64_t> Tensor::to_int_vector() const {
  auto v = to_vector();
  return std::vector<std::int64_t>(v.begin(), v.end());
}

Tensor Tensor::view(const Shape& s) const {
  return fsdp::view(*this, s);
}
Tensor Tensor::reshape(const Shape& s) const {
  return fsdp::reshape(*this, s);
}
Tensor Tensor::flatten(std::int64_t a, std::int64_t b) const {
  return fsdp::flatten(*this, a, b);
}
Tensor Tensor::transpose(std::int64_t a, std::int64_t b) const {
  return fsdp::transpose(*this, a, b);
}
Tensor Tensor::t() const {
  FSDP_CHECK(dim() <= 2, ValueError, "t(): expects a tensor of at most 2 dimensions, got shape {}",
             shape_str(shape()));
  return dim() < 2 ? *this : fsdp::transpose(*this, 0, 1);
}
Tensor Tensor::permute(const Shape& d) const {
  return fsdp::permute(*this, d);
}
Tensor Tensor::unsqueeze(std::int64_t d) const {
  return fsdp::unsqueeze(*this, d);
}
Tensor Tensor::squeeze(std::int64_t d) const {
  return fsdp::squeeze(*this, d);
}
Tensor Tensor::expand(const Shape& s) const {
  return fsdp::expand(*this, s);
}
Tensor Tensor::narrow(std::int64_t d, std::int64_t s, std::int64_t l) const {
  return fsdp::narrow(*this, d, s, l);
}
Tensor Tensor::select(std::int64_t d, std::int64_t i) const {
  return fsdp::select(*this, d, i);
}
Tensor Tensor::contiguous() const {
  return is_contiguous() ? *this : fsdp::contiguous(*this);
}
Tensor Tensor::clone() const {
  return fsdp::clone(*this);
}
Tensor Tensor::to(DType d) const {
  return d == dtype() ? *this : fsdp::to_dtype(*this, d);
}
Tensor Tensor::to(Device d) const {
  return d == device() ? *this : fsdp::to_device(*this, d);
}
Tensor Tensor::sum() const {
  return fsdp::sum(*this);
}
Tensor Tensor::mean() const {
  return fsdp::mean(*this);
}

Tensor Tensor::detach() const {
  const auto& t = check();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.storage;
  impl->set_sizes(t.sizes());
  impl->strides = t.strides;
  impl->offset = t.offset;
  impl->dtype = t.dtype;
  impl->device = t.device;
  return Tensor(std::move(impl));
}

namespace {

// The copy of copy_ and copy_unversioned: within a device, or between the host and a device
// through the device's copy (it orders the copy on its streams).
void copy_values(const Tensor& dst, const Tensor& src, const char* op) {
  const Device dd = dst.device(), sd = src.device();
  FSDP_CHECK(dd == sd || dd.is_cpu() || sd.is_cpu(), NotImplementedError,
             "{}: a copy from {} to {} (shape {}) is not supported; copy through the host", op,
             sd.str(), dd.str(), shape_str(src.shape()));
  kernels(dd.is_cpu() ? sd : dd).copy_broadcast(dst, src);
}

}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  const auto& dst = check();
  FSDP_CHECK(broadcast_shapes(dst.sizes(), src.shape(), "copy_") == dst.sizes(), RuntimeError,
             "copy_: source of shape {} cannot be broadcast to destination shape {}",
             shape_str(src.shape()), shape_str(dst.sizes()));
  check_no_internal_overlap(*this, "copy_");
  if (is_meta() || src.is_meta()) return *this;
  check_storage_alive(*this, "copy_");
  check_storage_alive(src, "copy_");
  storage()->bump_version();
  copy_values(*this, src, "copy_");
  return *this;
}

Tensor& Tensor::fill_(double value) {
  const auto& t = check();
  if (is_meta()) return *this;
  check_storage_alive(*this, "fill_");
  t.storage->bump_version();
  kernels(device()).fill(*this, value);
  return *this;
}

// --- autograd accessors
bool Tensor::requires_grad() const {
  const auto& t = check();
  return t.autograd && t.autograd->requires_grad;
}

Tensor& Tensor::requires_grad_(bool rg) {
  check();
  auto& t = *impl_;
  if (t.autograd && t.autograd->grad_fn) {
    FSDP_CHECK(rg, RuntimeError,
               "you can only change requires_grad flags of leaf variables. If you want to use a "
               "computed variable in a subgraph that doesn't require differentiation use "
               "var_no_grad = var.detach().");
    return *this;
  }
  FSDP_CHECK(!rg || is_floating(t.dtype), RuntimeError,
             "only Tensors of floating point dtype can require gradients (got {})",
             dtype_name(t.dtype));
  t.autograd_meta().requires_grad = rg;
  return *this;
}

void Tensor::set_data(const Tensor& other) const {
  check();
  const auto& o = other.check();
  impl_->storage = o.storage;
  impl_->set_sizes(o.sizes());
  impl_->strides = o.strides;
  impl_->offset = o.offset;
  impl_->dtype = o.dtype;
  impl_->device = o.device;
}

bool Tensor::is_leaf() const {
  const auto& t = check();
  return !t.autograd || !t.autograd->grad_fn;
}

Tensor Tensor::grad() const {
  const auto& t = check();
  return t.autograd ? t.autograd->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined())
    FSDP_CHECK(g.shape() == shape(), ValueError,
               "set_grad: assigned grad has shape {} but the tensor has shape {}",
               shape_str(g.shape()), shape_str(shape()));
  impl_->autograd_meta().grad = g;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  const auto& t = check();
  return t.autograd ? t.autograd->grad_fn : none;
}

std::uint32_t Tensor::output_nr() const {
  const auto& t = check();
  return t.autograd ? t.autograd->output_nr : 0;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph);
}

HookHandle Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  FSDP_CHECK(requires_grad(), RuntimeError,
             "cannot register a hook on a tensor that doesn't require gradient (shape {})",
             shape_str(shape()));
  if (grad_fn()) return grad_fn()->add_tensor_pre_hook(output_nr(), std::move(hook));
  auto alive = std::make_shared<bool>(true);
  impl_->autograd_meta().leaf_hooks.push_back({alive, std::move(hook)});
  return HookHandle(alive);
}

HookHandle Tensor::register_post_accumulate_grad_hook(
    std::function<void(const Tensor&)> hook) const {
  FSDP_CHECK(is_leaf(), RuntimeError,
             "post accumulate grad hooks cannot be registered on non-leaf tensors (shape {})",
             shape_str(shape()));
  FSDP_CHECK(requires_grad(), RuntimeError,
             "cannot register a hook on a tensor that doesn't require gradient (shape {})",
             shape_str(shape()));
  auto alive = std::make_shared<bool>(true);
  impl_->autograd_meta().post_accumulate_hooks.push_back({alive, std::move(hook)});
  return HookHandle(alive);
}

void Tensor::retain_grad() const {
  FSDP_CHECK(requires_grad(), RuntimeError,
             "can't retain_grad on Tensor that has requires_grad=False");
  if (is_leaf()) return;
  auto& meta = impl_->autograd_meta();
  if (meta.retains_grad) return;
  meta.retains_grad = true;
  std::weak_ptr<TensorImpl> weak = impl_;
  grad_fn()->add_tensor_pre_hook(output_nr(), [weak](const Tensor& g) {
    if (auto self = weak.lock()) {
      auto& m = self->autograd_meta();
      if (!m.grad.defined()) {
        m.grad = g.detach().clone();
      } else {
        autograd::NoGradGuard ng;
        m.grad = add(m.grad, g);
      }
    }
    return Tensor();
  });
}

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  os << "tensor(" << shape_str(shape()) << ", " << dtype_name(dtype()) << ", " << device().str();
  if (requires_grad()) os << ", requires_grad";
  if (!is_meta() && numel() <= 16) {
    os << ", values [";
    auto v = to_vector();
    for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
    os << "]";
  }
  os << ")";
  return os.str();
}

Tensor make_view(const Tensor& base, const Shape& sizes, const Shape& strides,
                 std::int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->set_sizes(sizes);
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = base.dtype();
  impl->device = base.device();
  return Tensor(std::move(impl));
}

}  // namespace fsdp

namespace fsdp {

void check_no_internal_overlap(const Tensor& t, const char* op) {
  bool shared = false;
  for (std::size_t d = 0; d < t.shape().size(); ++d)
    shared = shared || (t.shape()[d] > 1 && t.strides()[d] == 0);
  FSDP_CHECK(!shared, RuntimeError,
             "{}: unsupported operation: more than one element of the written-to tensor refers to "
             "a single memory location (shape {}, strides {}); clone() the tensor before "
             "performing the operation",
             op, shape_str(t.shape()), shape_str(t.strides()));
}

void check_storage_alive(const Tensor& t, const char* op) {
  if (!t.defined() || t.numel() == 0 || t.is_meta()) return;
  const auto& storage = t.storage();
  std::int64_t last = t.storage_offset();
  for (std::size_t d = 0; d < t.shape().size(); ++d) last += (t.shape()[d] - 1) * t.strides()[d];
  const auto needed = static_cast<std::size_t>(last + 1) * dtype_size(t.dtype());
  const std::size_t held = storage ? storage->nbytes() : 0;
  FSDP_CHECK(held >= needed && (held == 0 || storage->data() != nullptr), RuntimeError,
             "{}: the storage of a tensor of shape {} ({}) has been freed (it holds {} bytes, the "
             "view needs {}). An FSDP unit's parameters exist only while the unit runs: call the "
             "FSDP unit, not a submodule inside it, or use summon_full_params()",
             op, shape_str(t.shape()), dtype_name(t.dtype()), held, needed);
}

void copy_unversioned(const Tensor& dst, const Tensor& src) {
  FSDP_CHECK(dst.shape() == src.shape(), RuntimeError,
             "copy_unversioned: destination of shape {} and source of shape {} differ",
             shape_str(dst.shape()), shape_str(src.shape()));
  if (dst.device() == src.device())
    ops_detail::copy_strided(dst, src);
  else if (dst.numel() > 0)  // an offloaded FSDP shard staged on its device, and back
    copy_values(dst, src, "copy_unversioned");
}

void copy_unversioned_non_blocking(const Tensor& dst, const Tensor& src) {
  const Device sd = src.device();
  const bool direct = dst.device().is_cpu() && sd.is_accelerator() && dst.dtype() == src.dtype() &&
                      dst.shape() == src.shape() && dst.is_contiguous() && src.is_contiguous() &&
                      dst.storage()->is_pinned() &&
                      device_copy(sd).device_to_pinned_host != nullptr;
  if (!direct) return copy_unversioned(dst, src);
  if (dst.numel() == 0) return;
  device_copy(sd).device_to_pinned_host(dst.data_ptr(), src.data_ptr(), dst.nbytes(),
                                        current_stream(sd));
}

}  // namespace fsdp
