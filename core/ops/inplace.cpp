// In-place updates used by optimizers and FSDP: not recorded by autograd, so they refuse to
// run where autograd would need to see them.
#include <cmath>

#include "core/dispatch/intercept.h"
#include "core/ops/elementwise_kernels.h"

namespace fsdp {
using namespace ops_detail;

namespace {

void check_inplace(const Tensor& a, const char* op) {
  if (!autograd::is_grad_enabled() || !a.requires_grad()) return;
  FSDP_CHECK(!a.is_leaf(), RuntimeError,
             "a leaf Variable that requires grad is being used in an in-place operation. ({} on "
             "a tensor of shape {}; wrap the update in a no-grad guard)",
             op, shape_str(a.shape()));
  throw RuntimeError(fmt::format(
      "{}: in-place updates are not recorded by autograd, so they cannot modify a tensor that "
      "requires grad (shape {}) while grad mode is on; use the out-of-place op instead",
      op, shape_str(a.shape())));
}

}  // namespace

Tensor& add_(Tensor& a, const Tensor& b, double alpha) {
  FSDP_DISPATCH_INPLACE("add_", add_, a, b, alpha);
  check_inplace(a, "add_");
  bool meta = check_devices("add_", {&a, &b});
  Shape shape = broadcast_shapes(a.shape(), b.shape(), "add_");
  FSDP_CHECK(shape == a.shape(), RuntimeError,
             "add_: output with shape {} doesn't match the broadcast shape {} (other has shape {})",
             shape_str(a.shape()), shape_str(shape), shape_str(b.shape()));
  FSDP_CHECK(is_floating(a.dtype()) || !is_floating(b.dtype()), RuntimeError,
             "add_: result type {} can't be cast to the desired output type {}",
             dtype_name(b.dtype()), dtype_name(a.dtype()));
  if (meta || a.numel() == 0) return a;
  // Reading from the buffer being written (other than the exact same elements): copy first.
  Tensor bb = b.storage() == a.storage() && !b.is_same(a) ? clone(b.detach()) : b;
  bb = as_dtype(bb, a.dtype());
  a.storage()->bump_version();
  dispatch_all(a.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const C al = static_cast<C>(alpha);
    if (alpha == 1.0)
      map2<T, T>(a, a, bb, [](auto x, auto y) { return x + y; });
    else
      map2<T, T>(a, a, bb, [al](auto x, auto y) { return x + al * y; });
  });
  return a;
}

Tensor& mul_(Tensor& a, double b) {
  FSDP_DISPATCH_INPLACE("mul_", mul_, a, b);
  check_inplace(a, "mul_");
  FSDP_CHECK(is_floating(a.dtype()) || std::floor(b) == b, RuntimeError,
             "mul_: result type Float can't be cast to the desired output type {} (scalar {})",
             dtype_name(a.dtype()), b);
  bool meta = check_devices("mul_", a);
  if (meta || a.numel() == 0) return a;
  a.storage()->bump_version();
  dispatch_all(a.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const C s = static_cast<C>(b);
    map1<T, T>(a, a, [s](auto x) { return x * s; });
  });
  return a;
}

}  // namespace fsdp
