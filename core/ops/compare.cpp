// Comparisons, logical_not, selection by a mask (where, masked_fill) and allclose.
#include <cmath>

#include "core/dispatch/intercept.h"
#include "core/ops/op_utils.h"

namespace fsdp {
using namespace ops_detail;

namespace {

Tensor compare(const char* op, const Tensor& a, const Tensor& b, CompareKind kind) {
  const Device dev = common_device(op, {&a, &b});
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = new_tensor(shape, DType::Bool, dev);
  if (dev.is_meta() || out.numel() == 0) return out;
  DType dt = result_type(a, b);
  Tensor ac = as_dtype(a, dt), bc = as_dtype(b, dt);
  kernels(dev).compare(kind, out, ac, bc);
  return out;
}

// `v` rounded to `dtype` (a float32 comparison sees 0.1 as 0.1f, as torch's, which converts the
// scalar to the comparison's dtype).
double rounded_to(double v, DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return static_cast<float>(v);
    case DType::Float16:
      return load(store<Half>(v));
    case DType::BFloat16:
      return load(store<BFloat16>(v));
    default:
      return v;
  }
}

// a `kind` b in scalar_result_type(a's dtype, b): int32 < 2.5 compares in float32.
Tensor compare_scalar(const char* op, const Tensor& a, const Scalar& b, CompareKind kind) {
  const Device dev = common_device(op, {&a});
  Tensor out = new_tensor(a.shape(), DType::Bool, dev);
  if (dev.is_meta() || out.numel() == 0) return out;
  const DType dt = scalar_result_type(a.dtype(), b);
  Tensor ac = as_dtype(a, dt);
  if (kind == CompareKind::Eq) {
    kernels(dev).eq_scalar(out, ac, rounded_to(b.to_double(), dt));
    return out;
  }
  kernels(dev).compare(kind, out, ac, full({}, b.to_double(), TensorOptions(dt, dev)));
  return out;
}

void check_mask(const char* op, const Tensor& mask) {
  FSDP_CHECK(mask.dtype() == DType::Bool || mask.dtype() == DType::UInt8, TypeError,
             "{}: expected a mask of dtype bool or uint8, got {} (shape {})", op,
             dtype_name(mask.dtype()), shape_str(mask.shape()));
}

}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("eq", eq, a, b);
  return compare("eq", a, b, CompareKind::Eq);
}
Tensor ne(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("ne", ne, a, b);
  return compare("ne", a, b, CompareKind::Ne);
}
Tensor lt(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("lt", lt, a, b);
  return compare("lt", a, b, CompareKind::Lt);
}
Tensor le(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("le", le, a, b);
  return compare("le", a, b, CompareKind::Le);
}
Tensor gt(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("gt", gt, a, b);
  return compare("gt", a, b, CompareKind::Gt);
}
Tensor ge(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("ge", ge, a, b);
  return compare("ge", a, b, CompareKind::Ge);
}

Tensor eq(const Tensor& a, Scalar b) {
  FSDP_DISPATCH("eq.Scalar", eq, a, b);
  return compare_scalar("eq", a, b, CompareKind::Eq);
}
Tensor ne(const Tensor& a, Scalar b) {
  FSDP_DISPATCH("ne.Scalar", ne, a, b);
  return compare_scalar("ne", a, b, CompareKind::Ne);
}
Tensor lt(const Tensor& a, Scalar b) {
  FSDP_DISPATCH("lt.Scalar", lt, a, b);
  return compare_scalar("lt", a, b, CompareKind::Lt);
}
Tensor le(const Tensor& a, Scalar b) {
  FSDP_DISPATCH("le.Scalar", le, a, b);
  return compare_scalar("le", a, b, CompareKind::Le);
}
Tensor gt(const Tensor& a, Scalar b) {
  FSDP_DISPATCH("gt.Scalar", gt, a, b);
  return compare_scalar("gt", a, b, CompareKind::Gt);
}
Tensor ge(const Tensor& a, Scalar b) {
  FSDP_DISPATCH("ge.Scalar", ge, a, b);
  return compare_scalar("ge", a, b, CompareKind::Ge);
}

Tensor logical_not(const Tensor& a) {
  FSDP_DISPATCH("logical_not", logical_not, a);
  const Device dev = common_device("logical_not", {&a});
  Tensor out = new_tensor(a.shape(), DType::Bool, dev);
  if (dev.is_meta() || out.numel() == 0) return out;
  kernels(dev).logical_not(out, a);
  return out;
}

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("where", where, condition, a, b);
  check_mask("where", condition);
  const Device dev = common_device("where", {&condition, &a, &b});
  Shape shape =
      broadcast_shapes(broadcast_shapes(condition.shape(), a.shape(), "where"), b.shape(), "where");
  DType dt = result_type(a, b);
  Tensor out = new_tensor(shape, dt, dev);
  if (!dev.is_meta() && out.numel() > 0)
    kernels(dev).where(out, as_dtype(condition, DType::Bool), as_dtype(a, dt), as_dtype(b, dt));
  bool ra = a.requires_grad(), rb = b.requires_grad();
  autograd::record("WhereBackward0", {a, b}, {out}, {condition},
                   [sa = a.shape(), da = a.dtype(), sb = b.shape(), db = b.dtype(), ra, rb](
                       const variable_list& s, const variable_list& g) -> variable_list {
                     Tensor ga, gb;
                     if (ra) ga = reduce_grad(masked_fill(g[0], logical_not(s[0]), 0.0), sa, da);
                     if (rb) gb = reduce_grad(masked_fill(g[0], s[0], 0.0), sb, db);
                     return {ga, gb};
                   });
  return out;
}

Tensor masked_fill(const Tensor& a, const Tensor& mask, Scalar value_s) {
  FSDP_DISPATCH("masked_fill", masked_fill, a, mask, value_s);
  const double value = value_s.to_double();
  check_mask("masked_fill", mask);
  check_scalar_fits(value, a.dtype(), "masked_fill", a.shape());
  const Device dev = common_device("masked_fill", {&a, &mask});
  Shape shape = broadcast_shapes(a.shape(), mask.shape(), "masked_fill");
  Tensor out = new_tensor(shape, a.dtype(), dev);
  if (!dev.is_meta() && out.numel() > 0)
    kernels(dev).masked_fill(out, a, as_dtype(mask, DType::Bool), value);
  autograd::record("MaskedFillBackward0", {a}, {out}, {mask},
                   [sa = a.shape(), da = a.dtype()](const variable_list& s,
                                                    const variable_list& g) -> variable_list {
                     return {reduce_grad(masked_fill(g[0], s[0], 0.0), sa, da)};
                   });
  return out;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  FSDP_CHECK(a.shape() == b.shape(), ValueError,
             "allclose: shapes {} and {} differ (allclose needs equal shapes)",
             shape_str(a.shape()), shape_str(b.shape()));
  FSDP_CHECK(!common_device("allclose", {&a, &b}).is_meta(), NotImplementedError,
             "allclose: meta tensors have no values to compare (shape {})", shape_str(a.shape()));
  std::vector<double> va = a.to_vector(), vb = b.to_vector();
  for (std::size_t i = 0; i < va.size(); ++i) {
    double x = va[i], y = vb[i];
    if (x == y) continue;  // also equal infinities
    if (std::isnan(x) || std::isnan(y) || std::isinf(x) || std::isinf(y)) return false;
    if (std::fabs(x - y) > atol + rtol * std::fabs(y)) return false;
  }
  return true;
}

}  // namespace fsdp
