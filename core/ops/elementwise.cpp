// Broadcasting binary arithmetic (add, sub, mul, div, maximum, minimum), scalar forms and
// unary math functions, each with its backward.
#include <cmath>

#include "core/dispatch/intercept.h"
#include "core/ops/op_utils.h"

namespace fsdp {
using namespace ops_detail;

namespace {

// Computes `kind` over the broadcast of a and b, both converted to `dtype` (16-bit floats
// compute in float32 inside the kernel), on their common device.
Tensor binary_forward(const char* op, const Tensor& a, const Tensor& b, DType dtype,
                      BinaryKind kind, double alpha = 1.0) {
  const Device dev = common_device(op, {&a, &b});
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = new_tensor(shape, dtype, dev);
  if (dev.is_meta() || out.numel() == 0) return out;
  Tensor ac = as_dtype(a, dtype), bc = as_dtype(b, dtype);
  kernels(dev).binary(kind, out, ac, bc, alpha);
  return out;
}

Tensor unary_forward(const char* op, const Tensor& a, DType dtype, UnaryKind kind,
                     double scalar = 0.0) {
  const Device dev = common_device(op, {&a});
  Tensor out = new_tensor(a.shape(), dtype, dev);
  if (dev.is_meta() || out.numel() == 0) return out;
  Tensor ac = as_dtype(a, dtype);
  kernels(dev).unary(kind, out, ac, scalar);
  return out;
}

// Float ops on integer inputs compute in the default float dtype.
DType float_result(DType t) {
  return is_floating(t) ? t : DType::Float32;
}

// sign(x) as a tensor of x's dtype (0 at 0), for abs's backward.
Tensor sign(const Tensor& a) {
  return unary_forward("sign", a, a.dtype(), UnaryKind::Sign);
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha_s) {
  FSDP_DISPATCH("add", add, a, b, alpha_s);
  DType dt = result_type(a, b);
  check_alpha("add", dt, alpha_s, a, b);
  const double alpha = alpha_s.to_double();
  Tensor out = binary_forward("add", a, b, dt, BinaryKind::Add, alpha);
  bool ra = a.requires_grad(), rb = b.requires_grad();
  autograd::record("AddBackward0", {a, b}, {out}, {},
                   [sa = a.shape(), da = a.dtype(), sb = b.shape(), db = b.dtype(), alpha, ra, rb](
                       const variable_list&, const variable_list& g) -> variable_list {
                     Tensor ga = ra ? reduce_grad(g[0], sa, da) : Tensor();
                     Tensor gb;
                     if (rb) gb = reduce_grad(alpha == 1.0 ? g[0] : mul(g[0], alpha), sb, db);
                     return {ga, gb};
                   });
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha_s) {
  FSDP_DISPATCH("sub", sub, a, b, alpha_s);
  FSDP_CHECK(a.dtype() != DType::Bool && b.dtype() != DType::Bool, TypeError,
             "sub: subtraction with a bool tensor is not supported (shapes {} and {}, dtypes {} "
             "and {}); to invert a mask use logical_not; use logical_xor instead of a difference",
             shape_str(a.shape()), shape_str(b.shape()), dtype_name(a.dtype()),
             dtype_name(b.dtype()));
  DType dt = result_type(a, b);
  check_alpha("sub", dt, alpha_s, a, b);
  const double alpha = alpha_s.to_double();
  Tensor out = binary_forward("sub", a, b, dt, BinaryKind::Sub, alpha);
  bool ra = a.requires_grad(), rb = b.requires_grad();
  autograd::record("SubBackward0", {a, b}, {out}, {},
                   [sa = a.shape(), da = a.dtype(), sb = b.shape(), db = b.dtype(), alpha, ra, rb](
                       const variable_list&, const variable_list& g) -> variable_list {
                     Tensor ga = ra ? reduce_grad(g[0], sa, da) : Tensor();
                     Tensor gb = rb ? reduce_grad(mul(g[0], -alpha), sb, db) : Tensor();
                     return {ga, gb};
                   });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("mul", mul, a, b);
  DType dt = result_type(a, b);
  Tensor out = binary_forward("mul", a, b, dt, BinaryKind::Mul);
  bool ra = a.requires_grad(), rb = b.requires_grad();
  autograd::record("MulBackward0", {a, b}, {out}, {rb ? a : Tensor(), ra ? b : Tensor()},
                   [sa = a.shape(), da = a.dtype(), sb = b.shape(), db = b.dtype(), ra, rb](
                       const variable_list& s, const variable_list& g) -> variable_list {
                     Tensor ga = ra ? reduce_grad(mul(g[0], s[1]), sa, da) : Tensor();
                     Tensor gb = rb ? reduce_grad(mul(g[0], s[0]), sb, db) : Tensor();
                     return {ga, gb};
                   });
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("div", div, a, b);
  DType dt = float_result(result_type(a, b));
  Tensor out = binary_forward("div", a, b, dt, BinaryKind::Div);
  bool ra = a.requires_grad(), rb = b.requires_grad();
  autograd::record("DivBackward0", {a, b}, {out}, {rb ? a : Tensor(), b},
                   [sa = a.shape(), da = a.dtype(), sb = b.shape(), db = b.dtype(), ra, rb](
                       const variable_list& s, const variable_list& g) -> variable_list {
                     Tensor ga = ra ? reduce_grad(div(g[0], s[1]), sa, da) : Tensor();
                     Tensor gb;
                     if (rb) gb = reduce_grad(neg(div(mul(g[0], s[0]), mul(s[1], s[1]))), sb, db);
                     return {ga, gb};
                   });
  return out;
}

// Ties split the gradient evenly between both inputs (PyTorch's rule for maximum/minimum).
static Tensor extremum(const char* op, const Tensor& a, const Tensor& b, bool is_max) {
  DType dt = result_type(a, b);
  Tensor out = binary_forward(op, a, b, dt, is_max ? BinaryKind::Maximum : BinaryKind::Minimum);
  bool ra = a.requires_grad(), rb = b.requires_grad();
  autograd::record(is_max ? "MaximumBackward0" : "MinimumBackward0", {a, b}, {out}, {a, b},
                   [sa = a.shape(), da = a.dtype(), sb = b.shape(), db = b.dtype(), ra, rb, is_max](
                       const variable_list& s, const variable_list& g) -> variable_list {
                     Tensor half = where(eq(s[0], s[1]), mul(g[0], 0.5), g[0]);
                     Tensor ga, gb;
                     if (ra) {
                       Tensor lose = is_max ? lt(s[0], s[1]) : gt(s[0], s[1]);
                       ga = reduce_grad(masked_fill(half, lose, 0.0), sa, da);
                     }
                     if (rb) {
                       Tensor lose = is_max ? gt(s[0], s[1]) : lt(s[0], s[1]);
                       gb = reduce_grad(masked_fill(half, lose, 0.0), sb, db);
                     }
                     return {ga, gb};
                   });
  return out;
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("maximum", maximum, a, b);
  return extremum("maximum", a, b, true);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("minimum", minimum, a, b);
  return extremum("minimum", a, b, false);
}

// --- tensor-scalar
Tensor add(const Tensor& a, Scalar b) {
  FSDP_DISPATCH("add.Scalar", add, a, b);
  DType dt = scalar_result_type(a.dtype(), b);
  Tensor out = unary_forward("add", a, dt, UnaryKind::AddScalar, b.to_double());
  autograd::record(
      "AddBackward1", {a}, {out}, {},
      [](const variable_list&, const variable_list& g) -> variable_list { return {g[0]}; });
  return out;
}

Tensor sub(const Tensor& a, Scalar b) {
  FSDP_CHECK(a.dtype() != DType::Bool && !b.is_bool(), TypeError,
             "sub: subtraction with a bool tensor or scalar is not supported (tensor of shape {} "
             "and dtype {}, scalar {}); to invert a mask use logical_not",
             shape_str(a.shape()), dtype_name(a.dtype()), b.str());
  return add(a, -b);
}

Tensor mul(const Tensor& a, Scalar b) {
  FSDP_DISPATCH("mul.Scalar", mul, a, b);
  DType dt = scalar_result_type(a.dtype(), b);
  Tensor out = unary_forward("mul", a, dt, UnaryKind::MulScalar, b.to_double());
  autograd::record("MulBackward1", {a}, {out}, {},
                   [b](const variable_list&, const variable_list& g) -> variable_list {
                     return {mul(g[0], b)};
                   });
  return out;
}

Tensor div(const Tensor& a, Scalar b) {
  FSDP_DISPATCH("div.Scalar", div, a, b);
  DType dt = float_result(scalar_result_type(a.dtype(), b));
  Tensor out = unary_forward("div", a, dt, UnaryKind::DivScalar, b.to_double());
  autograd::record("DivBackward1", {a}, {out}, {},
                   [b](const variable_list&, const variable_list& g) -> variable_list {
                     return {div(g[0], b)};
                   });
  return out;
}

Tensor pow(const Tensor& a, Scalar exponent) {
  FSDP_DISPATCH("pow", pow, a, exponent);
  DType dt = scalar_result_type(a.dtype(), exponent);
  FSDP_CHECK(is_floating(dt) || exponent.to_int() >= 0, RuntimeError,
             "pow: integers to negative integer powers are not allowed (tensor of shape {} and "
             "dtype {}, exponent {})",
             shape_str(a.shape()), dtype_name(a.dtype()), exponent.str());
  const double e = exponent.to_double();
  const UnaryKind kind = e == 2.0    ? UnaryKind::Square
                         : e == 1.0  ? UnaryKind::Identity
                         : e == 0.5  ? UnaryKind::Sqrt
                         : e == -0.5 ? UnaryKind::Rsqrt  // torch's too: NaN for -inf, not 0
                                     : UnaryKind::Pow;
  Tensor out = unary_forward("pow", a, dt, kind, e);
  autograd::record("PowBackward0", {a}, {out}, {a},
                   [e](const variable_list& s, const variable_list& g) -> variable_list {
                     if (e == 0.0) return {zeros_like(g[0])};
                     if (e == 1.0) return {g[0]};
                     if (e == 2.0) return {mul(g[0], mul(s[0], 2.0))};
                     return {mul(g[0], mul(pow(s[0], e - 1.0), e))};
                   });
  return out;
}

Tensor neg(const Tensor& a) {
  FSDP_DISPATCH("neg", neg, a);
  FSDP_CHECK(a.dtype() != DType::Bool, TypeError,
             "neg: negation, the `-` operator, on a bool tensor is not supported; use "
             "logical_not instead");
  Tensor out = unary_forward("neg", a, a.dtype(), UnaryKind::Neg);
  autograd::record(
      "NegBackward0", {a}, {out}, {},
      [](const variable_list&, const variable_list& g) -> variable_list { return {neg(g[0])}; });
  return out;
}

Tensor exp(const Tensor& a) {
  FSDP_DISPATCH("exp", exp, a);
  Tensor out = unary_forward("exp", a, float_result(a.dtype()), UnaryKind::Exp);
  autograd::record("ExpBackward0", {a}, {out}, {out},
                   [](const variable_list& s, const variable_list& g) -> variable_list {
                     return {mul(g[0], s[0])};
                   });
  return out;
}

Tensor log(const Tensor& a) {
  FSDP_DISPATCH("log", log, a);
  Tensor out = unary_forward("log", a, float_result(a.dtype()), UnaryKind::Log);
  autograd::record("LogBackward0", {a}, {out}, {a},
                   [](const variable_list& s, const variable_list& g) -> variable_list {
                     return {div(g[0], s[0])};
                   });
  return out;
}

Tensor sqrt(const Tensor& a) {
  FSDP_DISPATCH("sqrt", sqrt, a);
  Tensor out = unary_forward("sqrt", a, float_result(a.dtype()), UnaryKind::Sqrt);
  autograd::record("SqrtBackward0", {a}, {out}, {out},
                   [](const variable_list& s, const variable_list& g) -> variable_list {
                     return {div(g[0], mul(s[0], 2.0))};
                   });
  return out;
}

Tensor rsqrt(const Tensor& a) {
  FSDP_DISPATCH("rsqrt", rsqrt, a);
  Tensor out = unary_forward("rsqrt", a, float_result(a.dtype()), UnaryKind::Rsqrt);
  autograd::record("RsqrtBackward0", {a}, {out}, {out},
                   [](const variable_list& s, const variable_list& g) -> variable_list {
                     return {mul(mul(g[0], pow(s[0], 3.0)), -0.5)};
                   });
  return out;
}

Tensor abs(const Tensor& a) {
  FSDP_DISPATCH("abs", abs, a);
  FSDP_CHECK(a.dtype() != DType::Bool, TypeError,
             "abs: not implemented for bool tensors (shape {})", shape_str(a.shape()));
  Tensor out = unary_forward("abs", a, a.dtype(), UnaryKind::Abs);
  autograd::record("AbsBackward0", {a}, {out}, {a},
                   [](const variable_list& s, const variable_list& g) -> variable_list {
                     return {mul(g[0], sign(s[0]))};
                   });
  return out;
}

}  // namespace fsdp
