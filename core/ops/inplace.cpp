// In-place updates used by optimizers and FSDP: not recorded by autograd, so they refuse to
// run where autograd would need to see them.
#include <cmath>

#include "core/dispatch/intercept.h"
#include "core/ops/op_utils.h"

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

// torch's can_cast for an in-place result: a result of a higher category (bool < integral <
// floating) than `a` cannot be written into it.
void check_result_castable(const char* op, DType result, const Tensor& a,
                           const std::string& scalar = {}) {
  FSDP_CHECK(dtype_category(result) <= dtype_category(a.dtype()), RuntimeError,
             "{}: result type {} can't be cast to the desired output type {} (tensor of shape "
             "{}{})",
             op, dtype_name(result), dtype_name(a.dtype()), shape_str(a.shape()),
             scalar.empty() ? "" : ", scalar " + scalar);
}

}  // namespace

Tensor& add_(Tensor& a, const Tensor& b, Scalar alpha) {
  FSDP_DISPATCH_INPLACE("add_", add_, a, b, alpha);
  check_inplace(a, "add_");
  check_no_internal_overlap(a, "add_");
  const Device dev = common_device("add_", {&a, &b});
  // The output is no cpu scalar exception: a 0-d cpu `a` cannot take a device's result.
  FSDP_CHECK(dev.is_meta() || a.is_meta() || a.device() == dev, RuntimeError,
             "add_: Expected all tensors to be on the same device, but found at least two "
             "devices, {} and {}!",
             a.device().str(), dev.str());
  Shape shape = broadcast_shapes(a.shape(), b.shape(), "add_");
  FSDP_CHECK(shape == a.shape(), RuntimeError,
             "add_: output with shape {} doesn't match the broadcast shape {} (other has shape {})",
             shape_str(a.shape()), shape_str(shape), shape_str(b.shape()));
  const DType result = result_type(a, b);
  check_result_castable("add_", result, a);
  check_alpha("add_", result, alpha, a, b);
  if (dev.is_meta() || a.numel() == 0) return a;
  // Reading from the buffer being written (other than the exact same elements): copy first.
  Tensor bb = b.storage() == a.storage() && !b.is_same(a) ? clone(b.detach()) : b;
  bb = as_dtype(bb, a.dtype());
  a.storage()->bump_version();
  kernels(dev).binary(BinaryKind::Add, a, a, bb, alpha.to_double());
  return a;
}

Tensor& mul_(Tensor& a, Scalar b) {
  FSDP_DISPATCH_INPLACE("mul_", mul_, a, b);
  check_inplace(a, "mul_");
  check_no_internal_overlap(a, "mul_");
  check_result_castable("mul_", scalar_result_type(a.dtype(), b), a, b.str());
  const Device dev = common_device("mul_", {&a});
  if (dev.is_meta() || a.numel() == 0) return a;
  a.storage()->bump_version();
  kernels(dev).unary(UnaryKind::MulScalar, a, a, b.to_double());
  return a;
}

}  // namespace fsdp
