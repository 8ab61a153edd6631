// The kinds of the element-wise kernel families (binary, unary, compare, activation), apart from
// the kernel table so that device code (core/cuda's .cu files, compiled by nvcc without the
// tensor headers) switches on the very same enumerations.
#pragma once

#include <cstdint>

namespace fsdp {

// out = a op b (a, b already of out's dtype, broadcast to out's shape). Add and Sub scale b by
// alpha.
enum class BinaryKind : std::uint8_t { Add, Sub, Mul, Div, Maximum, Minimum };
// out = f(a) (a already of out's dtype); `scalar` is the operand of the *Scalar kinds and Pow.
enum class UnaryKind : std::uint8_t {
  AddScalar,
  MulScalar,
  DivScalar,
  Pow,
  Square,
  Identity,
  Sqrt,
  Neg,
  Exp,
  Log,
  Rsqrt,
  Abs,
  Sign
};
// out (bool) = a op b (a, b of one dtype, broadcast to out's shape).
enum class CompareKind : std::uint8_t { Eq, Ne, Lt, Le, Gt, Ge };
// torch.nn.functional's pointwise activations (Gelu: the erf form; GeluTanh: the tanh one;
// Silu: x sigmoid(x)).
enum class ActivationKind : std::uint8_t { Relu, Tanh, Sigmoid, Gelu, GeluTanh, Silu };

}  // namespace fsdp
