#include "core/tensor.h"

#include <cmath>
#include <sstream>

#include "core/autograd.h"
#include "core/dtype_convert.h"
#include "core/kernel_utils.h"
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
  for (auto d : shape) n *= d;
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

double Tensor::item() const {
  FSDP_CHECK(numel() == 1, ValueError,
             "item(): only a one-element tensor can be converted to a scalar (got shape {})",
             shape_str(shape()));
  check_cpu(*this, "item");
  return load_double(data_ptr(), dtype(), 0);
}

std::vector<double> Tensor::to_vector() const {
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

Tensor& Tensor::copy_(const Tensor& src) {
  const auto& dst = check();
  FSDP_CHECK(broadcast_shapes(dst.sizes(), src.shape(), "copy_") == dst.sizes(), RuntimeError,
             "copy_: source of shape {} cannot be broadcast to destination shape {}",
             shape_str(src.shape()), shape_str(dst.sizes()));
  if (is_meta() || src.is_meta()) return *this;
  check_cpu(*this, "copy_");
  check_cpu(src, "copy_");
  storage()->bump_version();
  if (src.dtype() == dtype() && src.shape() == shape() && is_contiguous() && src.is_contiguous()) {
    if (nbytes() && data_ptr() != src.data_ptr())
      std::memmove(data_ptr(), src.data_ptr(), nbytes());
    return *this;
  }
  Tensor s = src;
  // Reading from a buffer we are writing to: copy the source first.
  if (src.storage() == storage()) s = src.clone();
  if (s.shape() == shape() && is_contiguous() && s.is_contiguous() &&
      convert_contiguous(data_ptr(), dtype(), s.data_ptr(), s.dtype(), numel()))
    return *this;
  Shape sstr = broadcast_strides(s, dst.sizes());
  void* d = data_ptr();
  const void* sp = s.data_ptr();
  DType dd = dst.dtype, sd = s.dtype();
  // Rows contiguous on both sides (a narrowed or row-strided view): the bulk converter per row.
  const std::size_t nd = dst.sizes().size();
  if (nd >= 1 && dd != sd && dst.strides[nd - 1] == 1 && sstr[nd - 1] == 1 && numel() > 0) {
    const std::int64_t row = dst.sizes()[nd - 1];
    Shape outer(dst.sizes().begin(), dst.sizes().end() - 1);
    Shape dso(dst.strides.begin(), dst.strides.end() - 1), sso(sstr.begin(), sstr.end() - 1);
    auto* db = static_cast<char*>(d);
    const auto* sb = static_cast<const char*>(sp);
    const std::size_t de = dtype_size(dd), se = dtype_size(sd);
    bool converted = true;
    for_each_offset2(outer, dso, sso, [&](std::int64_t od, std::int64_t os) {
      converted = converted && convert_contiguous(db + std::size_t(od) * de, dd,
                                                  sb + std::size_t(os) * se, sd, row);
    });
    if (converted) return *this;
  }
  dispatch_all(dd, [&]<typename D>() {
    dispatch_all(sd, [&]<typename S>() {
      D* dp = static_cast<D*>(d);
      const S* spp = static_cast<const S*>(sp);
      for_each_offset2(dst.sizes(), dst.strides, sstr, [&](std::int64_t od, std::int64_t os) {
        if constexpr (std::is_same_v<D, S>)
          dp[od] = spp[os];
        else
          dp[od] = from_double<D>(to_double(spp[os]));
      });
    });
  });
  return *this;
}

Tensor& Tensor::fill_(double value) {
  const auto& t = check();
  if (is_meta()) return *this;
  check_cpu(*this, "fill_");
  t.storage->bump_version();
  void* p = data_ptr();
  dispatch_all(t.dtype, [&]<typename T>() {
    T v = from_double<T>(value);
    T* tp = static_cast<T*>(p);
    if (is_contiguous()) {
      std::int64_t n = numel();
      for (std::int64_t i = 0; i < n; ++i) tp[i] = v;
    } else {
      for_each_offset(t.sizes(), t.strides, [&](std::int64_t o) { tp[o] = v; });
    }
  });
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
  if (device().is_cpu() && numel() <= 16) {
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
  ops_detail::copy_strided(dst, src);
}

}  // namespace fsdp
